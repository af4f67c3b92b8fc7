package wire

import (
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/internal/codec"
)

// The messages raylets send the head carry arrays of structs. The generic
// decoder sizes a slice by an array's count before it reads the items,
// and an empty map decodes into a whole struct, so a frame of empty maps
// grew about 96× in the head (a 16 MiB Pull took 1.5 GiB, and pooled
// pulls keep their memory). RegisterRaylet first checks, without
// allocating, that its items are at least as big as a real one is; then
// it decodes as before, into the memory a reset message kept. The head
// decodes pulls and completion batches as PullIn and CompleteIn
// (completions.go) with the same rule; Pull's and Complete's
// UnmarshalCBOR keep it for a caller of the generic decoder.

const (
	// minCompletionBytes is the smallest completion: {1: its 12-byte ID}.
	// The head's record of one is 64 bytes, so completions cost it at
	// most 4.3× their encoding (their sizes 8×, the rest about 1×).
	minCompletionBytes = 15
	// minHeldBytes is the smallest held object: {1: its 16-byte ID}.
	minHeldBytes = 19
)

// checkItems refuses data whose array under key holds items smaller than
// min bytes on average.
func checkItems(data []byte, key uint64, min int, what string) error {
	n, size, err := codec.ArrayItems(data, key)
	if err != nil {
		return dag.Errorf(dag.KindInvalidArgument, "%s: %w", what, err)
	}
	if n > 0 && size/n < min {
		return dag.Errorf(dag.KindInvalidArgument, "%s: %d items in %d bytes; a real one takes at least %d", what, n, size, min)
	}
	return nil
}

// The same types without their UnmarshalCBOR, for the generic decoder.
type (
	pullFields     Pull
	completeFields Complete
	registerFields RegisterRaylet
)

// UnmarshalCBOR checks the completions' sizes, then decodes p as usual.
func (p *Pull) UnmarshalCBOR(data []byte) error {
	if err := checkItems(data, 3, minCompletionBytes, "pull: completions"); err != nil {
		return err
	}
	return codec.Unmarshal(data, (*pullFields)(p))
}

// UnmarshalCBOR checks the completions' sizes, then decodes c as usual.
func (c *Complete) UnmarshalCBOR(data []byte) error {
	if err := checkItems(data, 1, minCompletionBytes, "complete: completions"); err != nil {
		return err
	}
	return codec.Unmarshal(data, (*completeFields)(c))
}

// UnmarshalCBOR checks the held objects' sizes, then decodes r as usual.
func (r *RegisterRaylet) UnmarshalCBOR(data []byte) error {
	if err := checkItems(data, 5, minHeldBytes, "register raylet: held objects"); err != nil {
		return err
	}
	return codec.Unmarshal(data, (*registerFields)(r))
}
