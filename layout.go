package phobos

// layout places the chunks of a row-major array: chunk k of the grid
// (row-major over NSplits) covers a box of the whole array.
type layout struct {
	shape   []int64
	nsplits [][]int64
	offs    [][]int64 // per dimension: where each chunk starts
	width   int64
	strides []int64 // bytes per step along each dimension of the whole array
}

func newLayout(shape []int64, nsplits [][]int64, width int64) *layout {
	l := &layout{shape: shape, nsplits: nsplits, width: width}
	l.offs = make([][]int64, len(nsplits))
	for d, s := range nsplits {
		l.offs[d] = make([]int64, len(s))
		for i := 1; i < len(s); i++ {
			l.offs[d][i] = l.offs[d][i-1] + s[i-1]
		}
	}
	l.strides = make([]int64, len(shape))
	st := width
	for d := len(shape) - 1; d >= 0; d-- {
		l.strides[d] = st
		st *= shape[d]
	}
	return l
}

// index returns chunk k's grid position.
func (l *layout) index(k int) []int {
	idx := make([]int, len(l.nsplits))
	for d := len(l.nsplits) - 1; d >= 0; d-- {
		n := len(l.nsplits[d])
		idx[d] = k % n
		k /= n
	}
	return idx
}

// contiguous reports whether chunk k is one run of bytes in the whole
// array: true when every dimension after the first is in one chunk.
func (l *layout) contiguous(k int) bool {
	for d := 1; d < len(l.nsplits); d++ {
		if len(l.nsplits[d]) != 1 {
			return false
		}
	}
	return true
}

// span returns a contiguous chunk's byte offset and length.
func (l *layout) span(k int) (int64, int64) {
	if len(l.nsplits) == 0 {
		return 0, l.width
	}
	idx := l.index(k)
	n := l.nsplits[0][idx[0]] * l.strides[0]
	return l.offs[0][idx[0]] * l.strides[0], n
}

// scatter copies chunk k's bytes (row-major over the chunk's own shape)
// into out, one innermost row at a time.
func (l *layout) scatter(k int, data, out []byte) {
	nd := len(l.nsplits)
	idx := l.index(k)
	cshape := make([]int64, nd)
	for d := range cshape {
		cshape[d] = l.nsplits[d][idx[d]]
	}
	row := cshape[nd-1] * l.width
	if row == 0 {
		return
	}
	pos := make([]int64, nd) // position within the chunk, innermost fixed at 0
	for src := int64(0); src < int64(len(data)); src += row {
		dst := int64(0)
		for d := 0; d < nd; d++ {
			dst += (l.offs[d][idx[d]] + pos[d]) * l.strides[d]
		}
		copy(out[dst:dst+row], data[src:src+row])
		for d := nd - 2; d >= 0; d-- {
			pos[d]++
			if pos[d] < cshape[d] {
				break
			}
			pos[d] = 0
		}
	}
}
