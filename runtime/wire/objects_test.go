package wire

import "testing"

func TestStreamRequestRange(t *testing.T) {
	for _, tc := range []struct {
		name        string
		off, length int64
		size        int64
		wantOff, n  int64
		ok          bool
	}{
		{"whole", 0, 0, 100, 0, 100, true},
		{"whole of empty", 0, 0, 0, 0, 0, true},
		{"tail", 40, 0, 100, 40, 60, true},
		{"middle", 10, 20, 100, 10, 20, true},
		{"exactly to the end", 90, 10, 100, 90, 10, true},
		{"empty tail", 100, 0, 100, 100, 0, true},
		{"past the end", 90, 11, 100, 0, 0, false},
		{"offset past the end", 101, 0, 100, 0, 0, false},
		{"negative offset", -1, 0, 100, 0, 0, false},
		{"negative length", 0, -1, 100, 0, 0, false},
		{"huge length", 1, 1 << 62, 100, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := StreamRequest{Offset: tc.off, Length: tc.length}
			off, n, ok := r.Range(tc.size)
			if ok != tc.ok || off != tc.wantOff || n != tc.n {
				t.Errorf("Range(%d) of [%d,+%d) = %d, %d, %v; want %d, %d, %v", tc.size, tc.off, tc.length, off, n, ok, tc.wantOff, tc.n, tc.ok)
			}
		})
	}
}

// FuzzStreamRequestRange: whatever a peer asks for, an accepted range lies
// inside the object, so slicing with it cannot panic.
func FuzzStreamRequestRange(f *testing.F) {
	f.Add(int64(0), int64(0), int64(10))
	f.Add(int64(5), int64(5), int64(10))
	f.Add(int64(1<<62), int64(1<<62), int64(1<<62))
	f.Fuzz(func(t *testing.T, off, length, size int64) {
		if size < 0 {
			return // sizes come from the store, never from the peer
		}
		r := StreamRequest{Offset: off, Length: length}
		o, n, ok := r.Range(size)
		if ok && (o < 0 || n < 0 || o > size || n > size-o) {
			t.Fatalf("Range(%d) of [%d,+%d) accepted [%d,+%d)", size, off, length, o, n)
		}
	})
}
