package objectstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBlockSize(t *testing.T) {
	for _, tc := range []struct{ in, want int64 }{
		{0, 0}, {1, 64}, {63, 64}, {64, 64}, {65, 128}, {128, 128}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 64},
	} {
		if got := blockSize(tc.in); got != tc.want {
			t.Errorf("blockSize(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestNewAllocatorRejectsBadCapacity(t *testing.T) {
	for _, c := range []int64{0, -64, 63, 100} {
		if _, err := newAllocator(c); err == nil {
			t.Errorf("newAllocator(%d): want error", c)
		}
	}
}

// op is one step of an allocator script: alloc size bytes (want the given
// offset, or -1 for failure), or free the block allocated by step ref.
type op struct {
	alloc   int64
	wantOff int64
	free    int // index of an earlier alloc step; used when alloc == 0
}

func TestAllocatorScripts(t *testing.T) {
	const c = 1024
	tests := []struct {
		name        string
		ops         []op
		wantExtents int
		wantLargest int64
	}{
		{
			name:        "fresh",
			wantExtents: 1, wantLargest: c,
		},
		{
			name:        "fill exactly",
			ops:         []op{{alloc: c, wantOff: 0}, {alloc: 64, wantOff: -1}},
			wantExtents: 0, wantLargest: 0,
		},
		{
			name:        "too large fails",
			ops:         []op{{alloc: c + 64, wantOff: -1}},
			wantExtents: 1, wantLargest: c,
		},
		{
			name:        "sequential from the start",
			ops:         []op{{alloc: 64, wantOff: 0}, {alloc: 128, wantOff: 64}, {alloc: 64, wantOff: 192}},
			wantExtents: 1, wantLargest: c - 256,
		},
		{
			name: "hole is reused",
			ops: []op{
				{alloc: 128, wantOff: 0}, {alloc: 128, wantOff: 128}, {alloc: 128, wantOff: 256},
				{free: 1},
				{alloc: 128, wantOff: 128},
			},
			wantExtents: 1, wantLargest: c - 384,
		},
		{
			name: "best fit picks the smallest hole that fits",
			ops: []op{
				{alloc: 256, wantOff: 0}, {alloc: 64, wantOff: 256}, // 0: big hole, 1: spacer
				{alloc: 128, wantOff: 320}, {alloc: 64, wantOff: 448}, // 2: small hole, 3: spacer
				{alloc: 512, wantOff: 512}, // 4: fills the tail
				{free: 0}, {free: 2},
				{alloc: 128, wantOff: 320}, // the 128 hole, not the 256 one
			},
			wantExtents: 1, wantLargest: 256,
		},
		{
			name: "equal holes: lowest offset wins",
			ops: []op{
				{alloc: 128, wantOff: 0}, {alloc: 64, wantOff: 128}, {alloc: 128, wantOff: 192}, {alloc: 64, wantOff: 320},
				{free: 2}, {free: 0},
				{alloc: 128, wantOff: 0},
			},
			wantExtents: 2, wantLargest: c - 384,
		},
		{
			name: "free merges left neighbour",
			ops: []op{
				{alloc: 128, wantOff: 0}, {alloc: 128, wantOff: 128}, {alloc: c - 256, wantOff: 256},
				{free: 0}, {free: 1},
			},
			wantExtents: 1, wantLargest: 256,
		},
		{
			name: "free merges right neighbour",
			ops: []op{
				{alloc: 128, wantOff: 0}, {alloc: 128, wantOff: 128}, {alloc: c - 256, wantOff: 256},
				{free: 1}, {free: 0},
			},
			wantExtents: 1, wantLargest: 256,
		},
		{
			name: "free merges both neighbours",
			ops: []op{
				{alloc: 128, wantOff: 0}, {alloc: 128, wantOff: 128}, {alloc: 128, wantOff: 256}, {alloc: c - 384, wantOff: 384},
				{free: 0}, {free: 2}, {free: 1},
			},
			wantExtents: 1, wantLargest: 384,
		},
		{
			name: "fragmented: enough free bytes, no block large enough",
			ops: []op{
				{alloc: 256, wantOff: 0}, {alloc: 256, wantOff: 256}, {alloc: 256, wantOff: 512}, {alloc: 256, wantOff: 768},
				{free: 0}, {free: 2},
				{alloc: 512, wantOff: -1},
			},
			wantExtents: 2, wantLargest: 256,
		},
		{
			name: "everything freed coalesces to one block",
			ops: []op{
				{alloc: 64, wantOff: 0}, {alloc: 192, wantOff: 64}, {alloc: 64, wantOff: 256}, {alloc: 320, wantOff: 320},
				{free: 2}, {free: 0}, {free: 3}, {free: 1},
			},
			wantExtents: 1, wantLargest: c,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := newAllocator(c)
			if err != nil {
				t.Fatal(err)
			}
			offs := make([]int64, len(tc.ops))
			for i, o := range tc.ops {
				if o.alloc == 0 {
					ref := tc.ops[o.free]
					if err := a.free(offs[o.free], ref.alloc); err != nil {
						t.Fatalf("step %d: free of step %d: %v", i, o.free, err)
					}
				} else {
					off, ok := a.alloc(o.alloc)
					if !ok {
						off = -1
					}
					if off != o.wantOff {
						t.Fatalf("step %d: alloc(%d) = %d, want %d", i, o.alloc, off, o.wantOff)
					}
					offs[i] = off
				}
				if err := a.check(); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if got := a.freeExtents(); got != tc.wantExtents {
				t.Errorf("free extents = %d, want %d", got, tc.wantExtents)
			}
			if got := a.largestFree(); got != tc.wantLargest {
				t.Errorf("largest free = %d, want %d", got, tc.wantLargest)
			}
		})
	}
}

func TestAllocatorRejectsBadRequests(t *testing.T) {
	a, err := newAllocator(1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{0, -64, 1, 65, 2048} {
		if _, ok := a.alloc(size); ok {
			t.Errorf("alloc(%d) succeeded", size)
		}
	}
	off, ok := a.alloc(128)
	if !ok {
		t.Fatal("alloc(128) failed")
	}
	for _, tc := range []struct {
		name      string
		off, size int64
	}{
		{"zero size", off, 0},
		{"negative offset", -64, 64},
		{"misaligned offset", off + 1, 64},
		{"misaligned size", off, 100},
		{"past the end", 1024, 64},
		{"overflowing end", 64, 1 << 62},
		{"more than allocated", off, 256},
		{"start of free extent", 128, 64},
	} {
		if err := a.free(tc.off, tc.size); err == nil {
			t.Errorf("%s: free(%d, %d) succeeded", tc.name, tc.off, tc.size)
		}
	}
	if err := a.check(); err != nil {
		t.Fatalf("rejected frees changed state: %v", err)
	}
	if err := a.free(off, 128); err != nil {
		t.Fatal(err)
	}
	if err := a.free(off, 128); err == nil {
		t.Error("double free succeeded")
	}
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
}

// model is the obviously-correct twin of the allocator: a byte map of the
// arena. It checks that allocations never overlap and that an allocation
// fails only when no run of free granules is long enough.
type model struct {
	used []bool // one per granule
}

func (m *model) longestRun() int64 {
	var best, run int64
	for _, u := range m.used {
		if u {
			run = 0
			continue
		}
		run++
		best = max(best, run)
	}
	return best * Alignment
}

func (m *model) mark(off, size int64, v bool) error {
	for g := off / Alignment; g < (off+size)/Alignment; g++ {
		if m.used[g] == v {
			return fmt.Errorf("granule %d (offset %d) already in state used=%v", g, g*Alignment, v)
		}
		m.used[g] = v
	}
	return nil
}

// runModel drives a and the model with the choices in next (each call
// returns a number in [0, n)) for steps steps and checks them against each
// other after every step, then frees everything and checks that the arena
// is one free block again.
func runModel(t testing.TB, capacity int64, steps int, next func(n int) int) {
	a, err := newAllocator(capacity)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{used: make([]bool, capacity/Alignment)}
	type block struct{ off, size int64 }
	var live []block
	granules := int(capacity / Alignment)
	for i := 0; i < steps; i++ {
		if len(live) > 0 && next(5) < 2 {
			j := next(len(live))
			b := live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			if err := a.free(b.off, b.size); err != nil {
				t.Fatalf("step %d: free(%d,%d): %v", i, b.off, b.size, err)
			}
			if err := m.mark(b.off, b.size, false); err != nil {
				t.Fatalf("step %d: model: %v", i, err)
			}
		} else {
			// Mostly small blocks, sometimes large ones, so the arena fills and fragments.
			g := 1 + next(8)
			if next(8) == 0 {
				g = 1 + next(granules/2)
			}
			size := int64(g) * Alignment
			want := m.longestRun() >= size
			off, ok := a.alloc(size)
			if ok != want {
				t.Fatalf("step %d: alloc(%d) ok=%v, but the model's longest free run is %d", i, size, ok, m.longestRun())
			}
			if ok {
				if err := m.mark(off, size, true); err != nil {
					t.Fatalf("step %d: alloc(%d) = %d overlaps a live block: %v", i, size, off, err)
				}
				live = append(live, block{off, size})
			}
		}
		if err := a.check(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got, want := a.largestFree(), m.longestRun(); got != want {
			t.Fatalf("step %d: largestFree = %d, model says %d", i, got, want)
		}
	}
	for len(live) > 0 {
		j := next(len(live))
		b := live[j]
		live = slices.Delete(live, j, j+1)
		if err := a.free(b.off, b.size); err != nil {
			t.Fatalf("final free(%d,%d): %v", b.off, b.size, err)
		}
	}
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
	if a.used != 0 || a.freeExtents() != 1 || a.largestFree() != capacity {
		t.Fatalf("after freeing everything: used %d, %d extents, largest %d; want 0, 1, %d",
			a.used, a.freeExtents(), a.largestFree(), capacity)
	}
}

func TestAllocatorRandomAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0xa110c))
			runModel(t, 256*Alignment, 3000, r.IntN)
		})
	}
}

// FuzzAllocator runs the model check with the fuzzer choosing every step.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{7, 7, 7, 7, 0, 0, 0, 0, 255, 1, 128, 3})
	f.Fuzz(func(t *testing.T, choices []byte) {
		if len(choices) > 4096 {
			return
		}
		i := 0
		next := func(n int) int {
			if i >= len(choices) {
				return 0
			}
			c := int(choices[i])
			i++
			return c % n
		}
		runModel(t, 64*Alignment, len(choices)/2, next)
	})
}

// BenchmarkAllocatorSteadyState frees and allocates one block among live
// blocks of mixed sizes. Its cost should stay flat (logarithmic) as live
// grows, and it should not allocate.
func BenchmarkAllocatorSteadyState(b *testing.B) {
	for _, live := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprint("live=", live), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			a, err := newAllocator(int64(live) * 16 * Alignment)
			if err != nil {
				b.Fatal(err)
			}
			type block struct{ off, size int64 }
			blocks := make([]block, live)
			for i := range blocks {
				size := int64(1+r.IntN(8)) * Alignment
				off, ok := a.alloc(size)
				if !ok {
					b.Fatal("setup alloc failed")
				}
				blocks[i] = block{off, size}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := r.IntN(live)
				if err := a.free(blocks[j].off, blocks[j].size); err != nil {
					b.Fatal(err)
				}
				size := int64(1+r.IntN(8)) * Alignment
				off, ok := a.alloc(size)
				if !ok {
					b.Fatal("alloc failed")
				}
				blocks[j] = block{off, size}
			}
		})
	}
}
