package objectstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/phobos-project/phobos/dag"
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

// BenchmarkPut writes 1 MiB and 256 MiB objects into the store (Create,
// copy into the view, Seal, and Delete to make room again) and, in the same
// iterations, copies the same bytes between two heap buffers: copy() is the
// physical limit of a put. It reports both rates and put/copy, the share of
// the limit the store reaches (the target is at least 0.5).
func BenchmarkPut(b *testing.B) {
	for _, size := range []int{1 << 20, 256 << 20} {
		b.Run(fmt.Sprintf("size=%dMiB", size>>20), func(b *testing.B) {
			src := make([]byte, size)
			for i := range src {
				src[i] = byte(i)
			}
			dst := make([]byte, size)
			copy(dst, src) // fault the pages in before timing
			s := openBench(b, int64(size)+4096)
			id := oid(1)
			// The first write to each arena page faults it into this
			// process's page table (a few µs per 4 KiB page, paid once per
			// page for the life of a raylet); dst was faulted in the same
			// way above.
			put(b, s, id, src, nil)
			if err := s.Delete(id); err != nil {
				b.Fatal(err)
			}
			var putTime, copyTime time.Duration
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				view, err := s.Create(id, int64(size), nil)
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
				putTime += time.Since(start)
				start = time.Now()
				copy(dst, src)
				copyTime += time.Since(start)
			}
			mb := float64(size) * float64(b.N) / (1 << 20)
			b.ReportMetric(mb/putTime.Seconds(), "put-MB/s")
			b.ReportMetric(mb/copyTime.Seconds(), "copy-MB/s")
			b.ReportMetric(copyTime.Seconds()/putTime.Seconds(), "put/copy")
		})
	}
}

// BenchmarkGetRelease pins and unpins one object. The cost must not depend
// on the object's size (no bytes are copied) and must not allocate.
func BenchmarkGetRelease(b *testing.B) {
	for _, size := range []int64{64, 1 << 20, 256 << 20} {
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
// lives (one put plus one get); the target is at least 200,000. In the same
// run it measures a floor: the least any store must do per life, a 64-byte
// copy plus a map insert, lookup and delete, each under a mutex, and
// reports floor-ops/s and ops/floor.
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
	var mu sync.Mutex
	floorMap := make(map[dag.ObjectID][]byte, live+1024)
	for i := range uint64(live) {
		floorMap[oid(i)] = make([]byte, 64)
	}
	floorBufs := make([][]byte, len(ids))
	for i := range floorBufs {
		floorBufs[i] = make([]byte, 64)
	}
	var storeTime, floorTime time.Duration
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		id := oid(ids[n%len(ids)])
		buf := floorBufs[n%len(ids)]
		n++
		start := time.Now()
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
		mid := time.Now()
		storeTime += mid.Sub(start)

		copy(buf, payload)
		mu.Lock()
		floorMap[id] = buf
		mu.Unlock()
		mu.Lock()
		v := floorMap[id]
		mu.Unlock()
		_ = v[0]
		mu.Lock()
		delete(floorMap, id)
		mu.Unlock()
		floorTime += time.Since(mid)
	}
	b.ReportMetric(float64(n)/storeTime.Seconds(), "ops/s")
	b.ReportMetric(float64(n)/floorTime.Seconds(), "floor-ops/s")
	b.ReportMetric(floorTime.Seconds()/storeTime.Seconds(), "ops/floor")
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
