package objectstore

import (
	"errors"
	"fmt"
	"testing"
)

// openBench opens a store in the default dir (/dev/shm here), where a
// raylet's store lives, rather than in a disk-backed temp dir.
func openBench(b *testing.B, capacity int64) *Store {
	b.Helper()
	s, err := Open(Config{Name: "bench-" + b.Name(), Capacity: capacity})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			b.Errorf("close: %v", err)
		}
	})
	return s
}

// BenchmarkPut1MiB compares writing 1 MiB into the store (Create, copy into
// the view, Seal, and Delete to make room again) with a plain copy of 1 MiB
// between heap buffers. The difference is the store's own overhead.
func BenchmarkPut1MiB(b *testing.B) {
	const size = 1 << 20
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	b.Run("store", func(b *testing.B) {
		s := openBench(b, 4*size)
		id := oid(1)
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			view, err := s.Create(id, size, nil)
			if err != nil {
				b.Fatal(err)
			}
			copy(view, src)
			if err := s.Seal(id); err != nil {
				b.Fatal(err)
			}
			if err := s.Delete(id); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		dst := make([]byte, size)
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			copy(dst, src)
		}
	})
}

// BenchmarkGetRelease pins and unpins one object. The cost must not depend
// on the object's size (no bytes are copied) and must not allocate.
func BenchmarkGetRelease(b *testing.B) {
	for _, size := range []int64{64, 64 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			s := openBench(b, size+4096)
			id := oid(1)
			if _, err := s.Create(id, size, nil); err != nil {
				b.Fatal(err)
			}
			if err := s.Seal(id); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				obj, err := s.Get(id)
				if err != nil {
					b.Fatal(err)
				}
				if len(obj.Data) != int(size) {
					b.Fatal("short view")
				}
				s.Release(id)
			}
		})
	}
}

// BenchmarkSmallPutGet is the full life of a 64-byte object among 10,000
// live ones: Create, copy, Seal, Get, Release, Delete. ops/s counts whole
// lives (one put plus one get).
func BenchmarkSmallPutGet(b *testing.B) {
	const live = 10_000
	s := openBench(b, 4<<20)
	payload := make([]byte, 64)
	for i := range uint64(live) {
		put(b, s, oid(i), payload, nil)
	}
	ids := make([]uint64, 0, 1024)
	for i := range uint64(1024) {
		ids = append(ids, live+i)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		id := oid(ids[n%len(ids)])
		n++
		view, err := s.Create(id, 64, nil)
		if err != nil {
			b.Fatal(err)
		}
		copy(view, payload)
		if err := s.Seal(id); err != nil {
			b.Fatal(err)
		}
		obj, err := s.Get(id)
		if err != nil {
			b.Fatal(err)
		}
		_ = obj.Data[0]
		s.Release(id)
		if err := s.Delete(id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkParallelGetRelease measures contention on the store's mutex with
// every CPU reading the same objects.
func BenchmarkParallelGetRelease(b *testing.B) {
	s := openBench(b, 1<<20)
	for i := range uint64(64) {
		put(b, s, oid(i), make([]byte, 64), nil)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := uint64(0)
		for pb.Next() {
			id := oid(i % 64)
			i++
			if _, err := s.Get(id); err != nil {
				b.Fatal(err)
			}
			s.Release(id)
		}
	})
}
