package tensor

import (
	"math"
	"unsafe"
)

// The inner loops of the kernels. Each is a plain loop over slices with the
// bounds checks hoisted (re-slicing every operand to len(d) first) and
// unrolled by four, so it runs without calls, interface dispatch or
// allocation; the generic ones are instantiated once for float64 and once
// for int64 (different GC shapes, so each gets its own machine code).
// Operands of the same length may alias dst (in-place is fine).

type num interface{ ~float64 | ~int64 }

// asI64 views float64 storage as int64 (same size; the engine keeps every
// block as []float64 and reinterprets it by the value's dtype).
func asI64(x []float64) []int64 {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&x[0])), len(x))
}

func addVV[T num](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = a[i]+b[i], a[i+1]+b[i+1], a[i+2]+b[i+2], a[i+3]+b[i+3]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + b[i]
	}
}

func addVS[T num](d, a []T, s T) {
	a = a[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = a[i]+s, a[i+1]+s, a[i+2]+s, a[i+3]+s
	}
	for ; i < len(d); i++ {
		d[i] = a[i] + s
	}
}

func subVV[T num](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = a[i]-b[i], a[i+1]-b[i+1], a[i+2]-b[i+2], a[i+3]-b[i+3]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] - b[i]
	}
}

func subVS[T num](d, a []T, s T) {
	a = a[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = a[i]-s, a[i+1]-s, a[i+2]-s, a[i+3]-s
	}
	for ; i < len(d); i++ {
		d[i] = a[i] - s
	}
}

func subSV[T num](d []T, s T, a []T) {
	a = a[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = s-a[i], s-a[i+1], s-a[i+2], s-a[i+3]
	}
	for ; i < len(d); i++ {
		d[i] = s - a[i]
	}
}

func mulVV[T num](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = a[i]*b[i], a[i+1]*b[i+1], a[i+2]*b[i+2], a[i+3]*b[i+3]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] * b[i]
	}
}

func mulVS[T num](d, a []T, s T) {
	a = a[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = a[i]*s, a[i+1]*s, a[i+2]*s, a[i+3]*s
	}
	for ; i < len(d); i++ {
		d[i] = a[i] * s
	}
}

func maxVV[T num](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

func maxVS[T num](d, a []T, s T) {
	a = a[:len(d)]
	for i := range d {
		d[i] = max(a[i], s)
	}
}

func minVV[T num](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

func minVS[T num](d, a []T, s T) {
	a = a[:len(d)]
	for i := range d {
		d[i] = min(a[i], s)
	}
}

func divVV(d, a, b []float64) {
	a, b = a[:len(d)], b[:len(d)]
	i := 0
	for ; i+4 <= len(d); i += 4 {
		d[i], d[i+1], d[i+2], d[i+3] = a[i]/b[i], a[i+1]/b[i+1], a[i+2]/b[i+2], a[i+3]/b[i+3]
	}
	for ; i < len(d); i++ {
		d[i] = a[i] / b[i]
	}
}

func divVS(d, a []float64, s float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = a[i] / s // not a*(1/s): that rounds differently
	}
}

func divSV(d []float64, s float64, a []float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = s / a[i]
	}
}

func powVV(d, a, b []float64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = math.Pow(a[i], b[i])
	}
}

func powVS(d, a []float64, s float64) {
	a = a[:len(d)]
	switch s {
	case 2:
		for i := range d {
			d[i] = a[i] * a[i] // math.Pow(x, 2) is exactly x*x
		}
	case 1:
		copy(d, a)
	default:
		for i := range d {
			d[i] = math.Pow(a[i], s)
		}
	}
}

func powSV(d []float64, s float64, a []float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = math.Pow(s, a[i])
	}
}

func neg[T num](d, a []T) {
	a = a[:len(d)]
	for i := range d {
		d[i] = -a[i]
	}
}

func absF(d, a []float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = math.Abs(a[i])
	}
}

func absI(d, a []int64) {
	a = a[:len(d)]
	for i := range d {
		x := a[i]
		m := x >> 63
		d[i] = (x ^ m) - m
	}
}

func expF(d, a []float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = math.Exp(a[i])
	}
}

func logF(d, a []float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = math.Log(a[i])
	}
}

func sqrtF(d, a []float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = math.Sqrt(a[i])
	}
}

func castIF(d []float64, a []int64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = float64(a[i])
	}
}

// castFI truncates toward zero, as NumPy's astype(int64). NaN and values
// outside int64's range give an unspecified int64, as in Go.
func castFI(d []int64, a []float64) {
	a = a[:len(d)]
	for i := range d {
		d[i] = int64(a[i])
	}
}

func fill[T num](d []T, v T) {
	for i := range d {
		d[i] = v
	}
}

// Reductions of one run: eight independent accumulators let the CPU overlap
// the additions; the order is fixed, so the result is reproducible.

func sum8[T num](x []T) T {
	var s0, s1, s2, s3, s4, s5, s6, s7 T
	i := 0
	for ; i+8 <= len(x); i += 8 {
		s0 += x[i]
		s1 += x[i+1]
		s2 += x[i+2]
		s3 += x[i+3]
		s4 += x[i+4]
		s5 += x[i+5]
		s6 += x[i+6]
		s7 += x[i+7]
	}
	for ; i < len(x); i++ {
		s0 += x[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

// sum8Pair is sum8 of x∘y without storing x∘y: element i goes to the same
// accumulator as in sum8, and each x[i]∘y[i] is rounded on its own (the
// conversion stops the compiler fusing x*y+s into an FMA).
func sum8Pair[T num](op opcode, x, y []T) T {
	switch op {
	case opAdd:
		return sum8Add(x, y)
	case opSub:
		return sum8Sub(x, y)
	}
	return sum8Mul(x, y)
}

func sum8Add[T num](x, y []T) T {
	y = y[:len(x)]
	var s0, s1, s2, s3, s4, s5, s6, s7 T
	i := 0
	for ; i+8 <= len(x); i += 8 {
		s0 += x[i] + y[i]
		s1 += x[i+1] + y[i+1]
		s2 += x[i+2] + y[i+2]
		s3 += x[i+3] + y[i+3]
		s4 += x[i+4] + y[i+4]
		s5 += x[i+5] + y[i+5]
		s6 += x[i+6] + y[i+6]
		s7 += x[i+7] + y[i+7]
	}
	for ; i < len(x); i++ {
		s0 += x[i] + y[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func sum8Sub[T num](x, y []T) T {
	y = y[:len(x)]
	var s0, s1, s2, s3, s4, s5, s6, s7 T
	i := 0
	for ; i+8 <= len(x); i += 8 {
		s0 += x[i] - y[i]
		s1 += x[i+1] - y[i+1]
		s2 += x[i+2] - y[i+2]
		s3 += x[i+3] - y[i+3]
		s4 += x[i+4] - y[i+4]
		s5 += x[i+5] - y[i+5]
		s6 += x[i+6] - y[i+6]
		s7 += x[i+7] - y[i+7]
	}
	for ; i < len(x); i++ {
		s0 += x[i] - y[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func sum8Mul[T num](x, y []T) T {
	y = y[:len(x)]
	var s0, s1, s2, s3, s4, s5, s6, s7 T
	i := 0
	for ; i+8 <= len(x); i += 8 {
		s0 += T(x[i] * y[i])
		s1 += T(x[i+1] * y[i+1])
		s2 += T(x[i+2] * y[i+2])
		s3 += T(x[i+3] * y[i+3])
		s4 += T(x[i+4] * y[i+4])
		s5 += T(x[i+5] * y[i+5])
		s6 += T(x[i+6] * y[i+6])
		s7 += T(x[i+7] * y[i+7])
	}
	for ; i < len(x); i++ {
		s0 += T(x[i] * y[i])
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func prod4[T num](x []T) T {
	var p0, p1, p2, p3 T = 1, 1, 1, 1
	i := 0
	for ; i+4 <= len(x); i += 4 {
		p0 *= x[i]
		p1 *= x[i+1]
		p2 *= x[i+2]
		p3 *= x[i+3]
	}
	for ; i < len(x); i++ {
		p0 *= x[i]
	}
	return (p0 * p1) * (p2 * p3)
}

// min4 and max4 start from the first element, so they need len(x) > 0.
func min4[T num](x []T) T {
	m0 := x[0]
	m1, m2, m3 := m0, m0, m0
	i := 1
	for ; i+4 <= len(x); i += 4 {
		m0 = min(m0, x[i])
		m1 = min(m1, x[i+1])
		m2 = min(m2, x[i+2])
		m3 = min(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = min(m0, x[i])
	}
	return min(min(m0, m1), min(m2, m3))
}

func max4[T num](x []T) T {
	m0 := x[0]
	m1, m2, m3 := m0, m0, m0
	i := 1
	for ; i+4 <= len(x); i += 4 {
		m0 = max(m0, x[i])
		m1 = max(m1, x[i+1])
		m2 = max(m2, x[i+2])
		m3 = max(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = max(m0, x[i])
	}
	return max(max(m0, m1), max(m2, m3))
}

// Accumulating a run into a row of partial results.

func accSum[T num](d, x []T) { addVV(d, d, x) }

func accProd[T num](d, x []T) { mulVV(d, d, x) }

func accMin[T num](d, x []T) { minVV(d, d, x) }

func accMax[T num](d, x []T) { maxVV(d, d, x) }
