package dag

import (
	"encoding/binary"
	"fmt"
)

// Shuffles (Mars's MapReduce and FetchShuffle): a mapper chunk writes one
// partitioned object holding M parts; reducer j reads part j of every
// mapper. A reducer's op declares this by implementing PartitionReader, and
// raylets then fetch only that part of each input, not whole objects.
//
// A partitioned object is laid out as
//
//	uint64 M | uint64 offset[0] … offset[M] | part 0 | … | part M-1
//
// (little-endian), where part p is bytes [offset[p], offset[p+1]) of the
// data after the header.

// PartitionReader is an op that reads one part of each of its inputs.
type PartitionReader interface {
	Op
	// ReadsPartition returns the part a chunk with these args and grid index
	// reads from every input.
	ReadsPartition(args []byte, index []int32) int
}

// PartitionedSize returns the bytes of a partitioned object whose parts
// have these sizes.
func PartitionedSize(sizes []int) int {
	n := 8 * (len(sizes) + 2)
	for _, s := range sizes {
		n += s
	}
	return n
}

// WritePartitionHeader writes the header for parts of these sizes into
// dst (which must hold PartitionedSize(sizes) bytes) and returns the slice
// of each part in dst, for the caller to fill.
func WritePartitionHeader(dst []byte, sizes []int) [][]byte {
	m := len(sizes)
	binary.LittleEndian.PutUint64(dst, uint64(m))
	off := 0
	parts := make([][]byte, m)
	data := dst[8*(m+2):]
	for p, s := range sizes {
		binary.LittleEndian.PutUint64(dst[8*(p+1):], uint64(off))
		parts[p] = data[off : off+s : off+s]
		off += s
	}
	binary.LittleEndian.PutUint64(dst[8*(m+1):], uint64(off))
	return parts
}

// PartitionRange returns where part p lies in a partitioned object of the
// given total size, given its header (at least the first 8*(M+2) bytes).
func PartitionRange(header []byte, total int64, p int) (start, end int64, err error) {
	if len(header) < 8 {
		return 0, 0, fmt.Errorf("partitioned object: %d-byte header", len(header))
	}
	m := binary.LittleEndian.Uint64(header)
	if m == 0 || m > 1<<24 || uint64(len(header)) < 8*(m+2) {
		return 0, 0, fmt.Errorf("partitioned object: header claims %d parts in %d bytes", m, len(header))
	}
	if p < 0 || uint64(p) >= m {
		return 0, 0, fmt.Errorf("partitioned object: part %d of %d", p, m)
	}
	base := int64(8 * (m + 2))
	s := int64(binary.LittleEndian.Uint64(header[8*(p+1):]))
	e := int64(binary.LittleEndian.Uint64(header[8*(p+2):]))
	if s < 0 || e < s || base+e > total {
		return 0, 0, fmt.Errorf("partitioned object: part %d spans [%d,%d) beyond its %d bytes", p, s, e, total)
	}
	return base + s, base + e, nil
}

// Partition returns part p of a whole partitioned object.
func Partition(obj []byte, p int) ([]byte, error) {
	s, e, err := PartitionRange(obj, int64(len(obj)), p)
	if err != nil {
		return nil, err
	}
	return obj[s:e:e], nil
}

// PartObjectID is the ID under which a raylet keeps its copy of part p of
// object id: the output index gets bit 31 set, the part in bits 8..30 and
// the output in bits 0..7.
func PartObjectID(id ObjectID, p int) ObjectID {
	return NewObjectID(id.Subtask(), 1<<31|uint32(p)<<8|id.Output()&0xff)
}

// ExternalReader is an op whose chunks read objects no subtask makes,
// such as data a driver put on a raylet: the head adds those objects to the
// inputs of the subtask that runs the chunk, after the chunk's own inputs.
type ExternalReader interface {
	Op
	ExternalInputs(args []byte) []ObjectID
}

// EachExternalInput calls f with every object a node of g reads through an
// ExternalReader op registered in reg, stopping at f's first error.
func (g *TileableGraph) EachExternalInput(reg *Registry, f func(node int32, id ObjectID) error) error {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		o, ok := reg.Lookup(n.Op)
		if !ok {
			continue
		}
		er, ok := o.(ExternalReader)
		if !ok {
			continue
		}
		for _, id := range er.ExternalInputs(n.Args) {
			if err := f(int32(i), id); err != nil {
				return err
			}
		}
	}
	return nil
}
