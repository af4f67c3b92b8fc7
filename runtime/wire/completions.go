package wire

import (
	"math"
	"time"

	"github.com/phobos-project/phobos/dag"
)

// Completions is a batch of completions as the head decodes them (PullIn,
// CompleteIn): a record each, and their sizes, fetched inputs and error
// texts one after another in lists of their own. None of it holds a
// pointer.
//
// Why: a head keeps a decoded request for each pull in flight, and a pull
// waits at the head until there is work for it. With a thousand raylets,
// a thousand requests were held, each with a list of up to a thousand
// Completion values grown by earlier batches: about 110 MB, and since a
// Completion holds slices and a string, the collector read all of it for
// pointers at every cycle. Two thirds of what it had to scan in the seed
// example at 1,000 simulated raylets was these lists, and a collection
// during a job then took a tenth of a second of CPU. Memory without
// pointers is only marked, not read; a record is also smaller than a
// Completion (64 bytes against 112).
//
// At fills a Completion from a record for the scheduler, its Sizes and
// Fetched pieces of the batch's lists (valid until the batch is reset).
type Completions struct {
	recs    []completionRec
	sizes   []int64
	fetched []dag.ObjectID
	errs    []byte
}

// span is a piece of one of a batch's lists.
type span struct{ off, n uint32 }

// completionRec is a Completion without pointers.
type completionRec struct {
	id                   dag.SubtaskID
	kind                 dag.Kind
	slot                 int16
	attempt              int64
	started              int64
	took, fetch          uint32
	sizes, fetched, errs span
}

// Len is the number of completions in b.
func (b *Completions) Len() int { return len(b.recs) }

// Reset empties b, keeping its memory.
func (b *Completions) Reset() {
	b.recs, b.sizes, b.fetched, b.errs = b.recs[:0], b.sizes[:0], b.fetched[:0], b.errs[:0]
}

// At sets *c to completion k of b. c.Sizes and c.Fetched are b's memory,
// valid until b is reset (nil when there are none); a failure's Error is
// a string of its own.
func (b *Completions) At(k int, c *Completion) {
	r := &b.recs[k]
	*c = Completion{ID: r.id, Kind: r.kind, Slot: r.slot, Attempt: int(r.attempt), Started: r.started, TookUS: r.took, FetchUS: r.fetch}
	if s := r.sizes; s.n > 0 {
		c.Sizes = b.sizes[s.off : s.off+s.n : s.off+s.n]
	}
	if s := r.fetched; s.n > 0 {
		c.Fetched = b.fetched[s.off : s.off+s.n : s.off+s.n]
	}
	if s := r.errs; s.n > 0 {
		c.Error = string(b.errs[s.off : s.off+s.n])
	}
}

// Append adds a copy of c to b.
func (b *Completions) Append(c *Completion) {
	r := completionRec{id: c.ID, kind: c.Kind, slot: c.Slot, attempt: int64(c.Attempt), started: c.Started, took: c.TookUS, fetch: c.FetchUS}
	r.sizes = span{uint32(len(b.sizes)), uint32(len(c.Sizes))}
	b.sizes = append(b.sizes, c.Sizes...)
	r.fetched = span{uint32(len(b.fetched)), uint32(len(c.Fetched))}
	b.fetched = append(b.fetched, c.Fetched...)
	r.errs = span{uint32(len(b.errs)), uint32(len(c.Error))}
	b.errs = append(b.errs, c.Error...)
	b.recs = append(b.recs, r)
}

// CompletionsOf is a batch of cs.
func CompletionsOf(cs ...Completion) Completions {
	var b Completions
	for i := range cs {
		b.Append(&cs[i])
	}
	return b
}

// PullIn is a Pull as the head decodes it: the same message, its
// completions in a batch without pointers.
type PullIn struct {
	Credits      int
	Wait         time.Duration
	Done         Completions
	FreesInReply bool
}

// Reset empties p for decoding into again, keeping its memory.
func (p *PullIn) Reset() { *p = PullIn{Done: p.Done}; p.Done.Reset() }

// CompleteIn is a Complete as the head decodes it (see PullIn).
type CompleteIn struct {
	Done Completions
}

// Reset empties c for decoding into again, keeping its memory.
func (c *CompleteIn) Reset() { c.Done.Reset() }

// DecodeCBOR decodes data, a Pull's encoding, into p (into p's memory: see
// Reset), as the generic decoder decodes it into a Pull, refusing
// completions smaller on average than a real one can be before it takes
// memory for them (see checkItems).
func (p *PullIn) DecodeCBOR(data []byte) error {
	d := reader{data: data}
	err := d.fields("pull", func(k uint64) (err error) {
		switch k {
		case 1:
			var v int64
			v, err = d.int(64, "pull: credits")
			p.Credits = int(v)
		case 2:
			var v int64
			v, err = d.int(64, "pull: wait")
			p.Wait = time.Duration(v)
		case 3:
			err = p.Done.decode(&d, "pull: completions")
		case 4:
			p.FreesInReply, err = d.bool("pull: frees in reply")
		default:
			err = d.skip(0)
		}
		return err
	})
	return d.end(err, "pull")
}

// DecodeCBOR decodes data, a Complete's encoding, into c (see PullIn's).
func (c *CompleteIn) DecodeCBOR(data []byte) error {
	d := reader{data: data}
	err := d.fields("complete", func(k uint64) (err error) {
		if k == 1 {
			err = c.Done.decode(&d, "complete: completions")
		} else {
			err = d.skip(0)
		}
		return err
	})
	return d.end(err, "completions")
}

// decode reads an array of completions (null: none) onto b.
func (b *Completions) decode(d *reader, what string) error {
	n, some, err := d.array(what)
	if err != nil || !some {
		return err
	}
	if err := d.fits(n, minCompletionBytes, what); err != nil {
		return err
	}
	// Room for the records and a size each (most subtasks have one
	// output), once the count is known to fit the data.
	b.recs = growCap(b.recs, n)
	b.sizes = growCap(b.sizes, n)
	for range n {
		if err := b.decodeOne(d); err != nil {
			return err
		}
	}
	return nil
}

// decodeOne reads one completion onto b.
func (b *Completions) decodeOne(d *reader) error {
	var r completionRec
	err := d.fields("completion", func(k uint64) (err error) {
		switch k {
		case 1:
			err = d.id(r.id[:], "completion: id")
		case 2:
			r.attempt, err = d.int(64, "completion: attempt")
		case 3:
			r.sizes, err = b.decodeSizes(d)
		case 4:
			var v uint64
			v, err = d.uint(math.MaxUint16, "completion: kind")
			r.kind = dag.Kind(v)
		case 5:
			r.errs, err = b.decodeError(d)
		case 6:
			r.fetched, err = b.decodeFetched(d)
		case 7:
			var v int64
			v, err = d.int(16, "completion: slot")
			r.slot = int16(v)
		case 8:
			r.started, err = d.int(64, "completion: started")
		case 9:
			var v uint64
			v, err = d.uint(math.MaxUint32, "completion: took")
			r.took = uint32(v)
		case 10:
			var v uint64
			v, err = d.uint(math.MaxUint32, "completion: fetch")
			r.fetch = uint32(v)
		default:
			err = d.skip(0)
		}
		return err
	})
	if err != nil {
		return err
	}
	b.recs = append(b.recs, r)
	return nil
}

func (b *Completions) decodeSizes(d *reader) (span, error) {
	start := len(b.sizes)
	s, err := d.int64sOnto(&b.sizes, "completion: sizes")
	if err != nil {
		return span{}, err
	}
	return span{uint32(start), uint32(len(s))}, nil
}

func (b *Completions) decodeFetched(d *reader) (span, error) {
	const what = "completion: fetched"
	n, some, err := d.array(what)
	if err != nil || !some {
		return span{}, err
	}
	if err := d.fits(n, minFreeIDBytes, what); err != nil {
		return span{}, err
	}
	start := len(b.fetched)
	b.fetched = growCap(b.fetched, n)
	for range n {
		var id dag.ObjectID
		if err := d.id(id[:], what); err != nil {
			return span{}, err
		}
		b.fetched = append(b.fetched, id)
	}
	return span{uint32(start), uint32(n)}, nil
}

func (b *Completions) decodeError(d *reader) (span, error) {
	text, err := d.textBytes("completion: error")
	if err != nil {
		return span{}, err
	}
	start := len(b.errs)
	b.errs = append(b.errs, text...)
	return span{uint32(start), uint32(len(text))}, nil
}

// growCap returns s with room for n more items, growing it by doubling.
func growCap[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	t := make([]T, len(s), max(2*cap(s), len(s)+n))
	copy(t, s)
	return t
}
