package objectstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/edsrzf/mmap-go"

	"github.com/phobos-project/phobos/dag"
)

// The arena file starts with one page of header, so that a process that
// maps the file can tell which store it belongs to before it trusts any
// offset. Layout (little-endian), the rest of the page is zero:
//
//	0   magic       8  "PHOBOSAR"
//	8   version     4  1
//	12  reserved    4  0
//	16  id         16  random, chosen at Open
//	32  dataOffset  8  file offset of arena offset 0 (the page size)
//	40  capacity    8  bytes of object space after dataOffset
const (
	headerSize    = 48
	headerMagic   = "PHOBOSAR"
	headerVersion = 1
)

// ErrNotArena is wrapped by OpenReader errors for a file that is not a
// phobos arena (or not the one expected).
var ErrNotArena = errors.New("objectstore: not a phobos arena file")

// arenaHeader is the decoded header of an arena file.
type arenaHeader struct {
	ID         [16]byte
	DataOffset int64
	Capacity   int64
}

func putHeader(b []byte, h arenaHeader) {
	copy(b[0:8], headerMagic)
	binary.LittleEndian.PutUint32(b[8:12], headerVersion)
	binary.LittleEndian.PutUint32(b[12:16], 0)
	copy(b[16:32], h.ID[:])
	binary.LittleEndian.PutUint64(b[32:40], uint64(h.DataOffset))
	binary.LittleEndian.PutUint64(b[40:48], uint64(h.Capacity))
}

// parseHeader decodes the header of a file of fileSize bytes. It checks
// that the object space lies inside the file, so offsets checked against
// Capacity are safe to slice with.
func parseHeader(b []byte, fileSize int64) (arenaHeader, error) {
	if len(b) < headerSize || fileSize < headerSize {
		return arenaHeader{}, fmt.Errorf("%w: %d bytes is shorter than the %d-byte header", ErrNotArena, min(int64(len(b)), fileSize), headerSize)
	}
	if string(b[0:8]) != headerMagic {
		return arenaHeader{}, fmt.Errorf("%w: bad magic %q", ErrNotArena, b[0:8])
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != headerVersion {
		return arenaHeader{}, fmt.Errorf("%w: header version %d, this build reads %d; run the same phobos release as the raylet", ErrNotArena, v, headerVersion)
	}
	var h arenaHeader
	copy(h.ID[:], b[16:32])
	off, capacity := binary.LittleEndian.Uint64(b[32:40]), binary.LittleEndian.Uint64(b[40:48])
	if off < headerSize || off > uint64(fileSize) || capacity > uint64(fileSize)-off {
		return arenaHeader{}, fmt.Errorf("%w: object space [%d,+%d) is not inside the %d-byte file", ErrNotArena, off, capacity, fileSize)
	}
	h.DataOffset, h.Capacity = int64(off), int64(capacity)
	return h, nil
}

// ArenaFile names a store's arena for readers in other processes on the
// same node: they map Path read-only with OpenReader and check that its ID
// is this one.
type ArenaFile struct {
	Path string
	ID   [16]byte
}

// ArenaFile returns the arena's path and random ID.
func (s *Store) ArenaFile() ArenaFile { return ArenaFile{Path: s.path, ID: s.arenaID} }

// Reader maps another process's arena file read-only (PROT_READ,
// MAP_SHARED), so sealed objects in it can be read without copying.
//
// A Reader knows nothing about which objects exist: the store's owner (a
// raylet) says where an object lies and pins it for as long as the reader
// uses it. A view from View is valid while that pin is held and the Reader
// is open; after the pin is released the space may hold another object.
// The mapping stays valid even if the owner removes the file or exits
// (the pages live until the last mapping goes), so a reader never faults.
//
// View, ID, Path and Capacity are safe for concurrent use; Close must not
// race with them, and every view is invalid after Close.
type Reader struct {
	path    string
	mapping mmap.MMap
	data    []byte // mapping[DataOffset:][:Capacity]
	id      [16]byte
}

// OpenReader maps the arena file at path read-only and checks its header.
// Errors wrap ErrNotArena (kind dag.KindInvalidArgument) for a file that
// is not an arena, or the os error (kind dag.KindNotFound when the file
// does not exist, which usually means the store is on another node).
func OpenReader(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		k := dag.KindUnavailable
		if errors.Is(err, os.ErrNotExist) {
			k = dag.KindNotFound
		}
		return nil, dag.Errorf(k, "objectstore: open arena %s for reading: %w", path, err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return nil, dag.Errorf(dag.KindUnavailable, "objectstore: stat arena %s: %w", path, err)
	}
	size := fi.Size()
	if !fi.Mode().IsRegular() || size < headerSize || size > int64(^uint(0)>>1) {
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: open arena %s: %w: a %d-byte %v", path, ErrNotArena, size, fi.Mode().Type())
	}
	m, err := mmap.MapRegion(f, int(size), mmap.RDONLY, 0, 0)
	if err != nil {
		return nil, dag.Errorf(dag.KindResourceExhausted, "objectstore: map arena %s read-only: %w", path, err)
	}
	h, err := parseHeader(m, size)
	if err != nil {
		_ = m.Unmap()
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: open arena %s: %w", path, err)
	}
	return &Reader{path: path, mapping: m, data: m[h.DataOffset : h.DataOffset+h.Capacity], id: h.ID}, nil
}

// ID returns the arena's random ID from its header.
func (r *Reader) ID() [16]byte { return r.id }

// Path returns the mapped file's path.
func (r *Reader) Path() string { return r.path }

// Capacity returns the size of the arena's object space.
func (r *Reader) Capacity() int64 { return int64(len(r.data)) }

// View returns size bytes at arena offset off (Object.Offset in the
// owner's store), straight from the mapping. It checks the range, never
// the contents. The view is read-only: writing it faults.
func (r *Reader) View(off, size int64) ([]byte, error) {
	capacity := int64(len(r.data))
	if off < 0 || size < 0 || off > capacity || size > capacity-off {
		return nil, dag.Errorf(dag.KindInvalidArgument, "objectstore: view [%d,+%d) of arena %s: outside its %d bytes", off, size, r.path, capacity)
	}
	return r.data[off : off+size : off+size], nil
}

// Close unmaps the arena. Every view becomes invalid.
func (r *Reader) Close() error {
	if r.mapping == nil {
		return nil
	}
	err := r.mapping.Unmap()
	r.mapping, r.data = nil, nil
	if err != nil {
		return dag.Errorf(dag.KindInternal, "objectstore: unmap arena %s: %w", r.path, err)
	}
	return nil
}
