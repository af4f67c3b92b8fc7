package objectstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/phobos-project/phobos/dag"
)

func TestReaderSeesSealedObjects(t *testing.T) {
	s := openTest(t, 1<<20)
	put(t, s, oid(1), pattern(1, 10_000), nil)
	r, err := OpenReader(s.ArenaFile().Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if r.ID() != s.ArenaFile().ID || r.Capacity() != 1<<20 {
		t.Errorf("reader id %x capacity %d; store id %x capacity %d", r.ID(), r.Capacity(), s.ArenaFile().ID, 1<<20)
	}
	o, err := s.Get(oid(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(oid(1))
	view, err := r.View(o.Offset, int64(len(o.Data)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(view, o.Data) {
		t.Fatal("the reader's view differs from the store's")
	}
	// The mapping is shared: objects sealed after OpenReader are visible too.
	put(t, s, oid(2), pattern(2, 300), nil)
	o2, err := s.Get(oid(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(oid(2))
	if view, err := r.View(o2.Offset, 300); err != nil || !bytes.Equal(view, pattern(2, 300)) {
		t.Errorf("later object through the reader: %v", err)
	}
	if v, err := r.View(0, 0); err != nil || len(v) != 0 {
		t.Errorf("empty view: %v", err)
	}
}

func TestReaderRejectsBadInput(t *testing.T) {
	s := openTest(t, 64<<10)
	r, err := OpenReader(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	for _, tc := range []struct{ off, size int64 }{
		{-1, 1}, {0, -1}, {0, 64<<10 + 1}, {64 << 10, 1}, {1 << 62, 1 << 62}, {64<<10 - 1, 2},
	} {
		if _, err := r.View(tc.off, tc.size); !errors.Is(err, dag.ErrInvalidArgument) {
			t.Errorf("View(%d, %d): %v, want invalid argument", tc.off, tc.size, err)
		}
	}

	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, bytes.Repeat([]byte("x"), 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReader(junk); !errors.Is(err, ErrNotArena) || !errors.Is(err, dag.ErrInvalidArgument) {
		t.Errorf("OpenReader of a non-arena file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReader(empty); !errors.Is(err, ErrNotArena) {
		t.Errorf("OpenReader of an empty file: %v", err)
	}
	if _, err := OpenReader(filepath.Join(dir, "missing")); !errors.Is(err, dag.ErrNotFound) {
		t.Errorf("OpenReader of a missing file: %v, want not found", err)
	}
	if _, err := OpenReader(dir); !errors.Is(err, ErrNotArena) {
		t.Errorf("OpenReader of a directory: %v", err)
	}
}

func TestParseHeader(t *testing.T) {
	good := make([]byte, headerSize)
	putHeader(good, arenaHeader{ID: [16]byte{1, 2, 3}, DataOffset: 4096, Capacity: 8192})
	mut := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		size int64
		ok   bool
	}{
		{"good", good, 4096 + 8192, true},
		{"file longer than needed", good, 1 << 20, true},
		{"short", good[:headerSize-1], 1 << 20, false},
		{"magic", mut(func(b []byte) { b[0] = 'X' }), 1 << 20, false},
		{"version", mut(func(b []byte) { b[8] = 2 }), 1 << 20, false},
		{"object space past the end", good, 4096 + 8191, false},
		{"offset inside the header", mut(func(b []byte) { b[32], b[33] = 8, 0 }), 1 << 20, false},
		{"huge capacity", mut(func(b []byte) { b[47] = 0xff }), 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseHeader(tc.b, tc.size)
			if tc.ok != (err == nil) {
				t.Fatalf("parseHeader: %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrNotArena) {
				t.Errorf("error %v does not wrap ErrNotArena", err)
			}
			if tc.ok && (h.ID != [16]byte{1, 2, 3} || h.DataOffset != 4096 || h.Capacity != 8192) {
				t.Errorf("header %+v", h)
			}
		})
	}
}

// FuzzParseHeader feeds arbitrary headers: parseHeader must never panic,
// and whatever it accepts must describe object space inside the file.
func FuzzParseHeader(f *testing.F) {
	good := make([]byte, headerSize)
	putHeader(good, arenaHeader{DataOffset: 4096, Capacity: 8192})
	f.Add(good, int64(4096+8192))
	f.Add([]byte("PHOBOSAR"), int64(100))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		h, err := parseHeader(b, size)
		if err != nil {
			return
		}
		if h.DataOffset < headerSize || h.Capacity < 0 || h.DataOffset+h.Capacity > size || h.DataOffset+h.Capacity < 0 {
			t.Fatalf("accepted a header whose object space [%d,+%d) is outside a %d-byte file", h.DataOffset, h.Capacity, size)
		}
	})
}
