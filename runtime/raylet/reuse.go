package raylet

import (
	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/wire"
)

// pullBatch is one pull's reply. Its specs are in use until every one of
// them has run or been dropped; then the batch is decoded into again, its
// slices keeping their memory, so that pulling allocates nothing in steady
// state. Nothing may keep a spec, or a slice of one, past its run: the
// worker finishes with a spec before it gives it back.
type pullBatch struct {
	rep  wire.PullReply
	left int // specs not yet run or dropped
	// after holds the specs' core.Subtask.After lists: the subtasks of
	// this raylet whose outputs they read and that had not stored them.
	after []dag.SubtaskID
}

// queued is a pulled subtask waiting for a worker.
type queued struct {
	spec *wire.SubtaskSpec
	b    *pullBatch
}

const maxFreeBatches = 64

// takeBatch returns an empty batch to decode a pull reply into. The loop
// owns the free batches.
func (r *Raylet) takeBatch() *pullBatch {
	if n := len(r.batches); n > 0 {
		b := r.batches[n-1]
		r.batches[n-1] = nil
		r.batches = r.batches[:n-1]
		return b
	}
	return &pullBatch{}
}

// putBatch gives back a batch none of whose specs are in use.
func (r *Raylet) putBatch(b *pullBatch) {
	if len(r.batches) < maxFreeBatches {
		b.rep.Reset()
		r.batches = append(r.batches, b)
	}
}

// specDone notes that one of b's specs is finished with.
func (r *Raylet) specDone(b *pullBatch) {
	if b.left--; b.left == 0 {
		r.putBatch(b)
	}
}

// int64Slab hands out small []int64s carved from larger blocks, so that a
// worker's per-subtask output sizes cost an allocation per block, not per
// subtask. A block is garbage once every completion carved from it has
// been sent.
type int64Slab struct{ free []int64 }

const slabBlock = 1024

// take returns n zeroed int64s.
func (s *int64Slab) take(n int) []int64 {
	if n > slabBlock/4 {
		return make([]int64, n)
	}
	if len(s.free) < n {
		s.free = make([]int64, slabBlock)
	}
	b := s.free[:n:n]
	s.free = s.free[n:]
	return b
}

// metaCache decodes object metas, remembering recent ones: a job's chunks
// share a handful of shapes, so inputs decode without allocating. Decoded
// shapes are shared; kernels read input metas and never change them.
type metaCache struct{ m map[string]dag.Meta }

const metaCacheSize = 256

func (c *metaCache) decode(b []byte) (dag.Meta, error) {
	if m, ok := c.m[string(b)]; ok {
		return m, nil
	}
	m, err := dag.DecodeMeta(b)
	if err != nil {
		return m, err
	}
	if c.m == nil || len(c.m) >= metaCacheSize {
		c.m = make(map[string]dag.Meta, metaCacheSize)
	}
	c.m[string(b)] = m
	return m, nil
}
