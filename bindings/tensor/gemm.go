package tensor

import "sync"

// A blocked matrix multiply in the style of Goto's GEMM: C += A·B for
// row-major float64 matrices. B is packed a panel of gemmKC rows ×
// gemmNC columns at a time (it stays in L2/L3), A a block of gemmMC rows ×
// gemmKC columns (L2), both into micro-panels laid out in the order the
// micro-kernel reads them, so its inner loop streams two short contiguous
// vectors and keeps an mr×nr block of C in registers.
//
// Every element of C gets, per gemmKC-long slice of k in order, the sum of
// its products accumulated from zero, then added to C. Which micro-kernel
// runs does not change that order; whether a*b+c is fused into one FMA does
// (the compiler fuses at GOAMD64=v3, the SIMD kernel always does), so
// results can differ in the last bits between builds, never between runs.

const (
	gemmKC = 256
	gemmMC = 64
	gemmNC = 512
)

// microKernel computes, for a full mr×nr tile, c[i*ldc+j] += Σ_p a[p*mr+i]·b[p*nr+j]
// over kb steps of packed a and b.
type microKernel struct {
	mr, nr int
	run    func(kb int, a, b, c []float64, ldc int)
	name   string
}

// portableKernel is plain Go: 2×4 accumulators fit the 15 usable XMM
// registers with room for the operands, so nothing spills.
var portableKernel = microKernel{mr: 2, nr: 4, run: micro2x4, name: "go-2x4"}

// gemmKernel is the micro-kernel in use; a SIMD build may replace it in init
// with the best of simdKernels (the ones this CPU supports).
var (
	gemmKernel  = portableKernel
	simdKernels []microKernel
)

func micro2x4(kb int, a, b, c []float64, ldc int) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float64
	a, b = a[:2*kb], b[:4*kb]
	for p := 0; p < kb; p++ {
		aa := a[2*p : 2*p+2 : 2*p+2]
		bb := b[4*p : 4*p+4 : 4*p+4]
		b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
		a0 := aa[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := aa[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	r0 := c[:4:4]
	r0[0] += c00
	r0[1] += c01
	r0[2] += c02
	r0[3] += c03
	r1 := c[ldc : ldc+4 : ldc+4]
	r1[0] += c10
	r1[1] += c11
	r1[2] += c12
	r1[3] += c13
}

type gemmBufs struct{ a, b, tile []float64 }

var gemmPool = sync.Pool{New: func() any { return new(gemmBufs) }}

// gemm computes c += a·b with a m×k, b k×n and c m×n, all row-major and
// contiguous. check is called between blocks and stops the multiply if it
// returns an error.
func gemm(m, n, k int, a, b, c []float64, check func() error) error {
	if m == 0 || n == 0 || k == 0 {
		return nil
	}
	kern := gemmKernel
	mr, nr := kern.mr, kern.nr
	bufs := gemmPool.Get().(*gemmBufs)
	defer gemmPool.Put(bufs)
	pa := grow(&bufs.a, roundUp(gemmMC, mr)*gemmKC)
	pb := grow(&bufs.b, gemmKC*roundUp(gemmNC, nr))
	tile := grow(&bufs.tile, mr*nr)
	for jc := 0; jc < n; jc += gemmNC {
		nb := min(gemmNC, n-jc)
		for pc := 0; pc < k; pc += gemmKC {
			kb := min(gemmKC, k-pc)
			packB(pb, b, n, pc, jc, kb, nb, nr)
			for ic := 0; ic < m; ic += gemmMC {
				if err := check(); err != nil {
					return err
				}
				mb := min(gemmMC, m-ic)
				packA(pa, a, k, ic, pc, mb, kb, mr)
				for jr := 0; jr < nb; jr += nr {
					bp := pb[jr*kb : (jr+nr)*kb]
					for ir := 0; ir < mb; ir += mr {
						ap := pa[ir*kb : (ir+mr)*kb]
						off := (ic+ir)*n + jc + jr
						if ir+mr <= mb && jr+nr <= nb {
							kern.run(kb, ap, bp, c[off:], n)
							continue
						}
						// An edge tile: compute it whole into tile, add the part inside C.
						clear(tile)
						kern.run(kb, ap, bp, tile, nr)
						for i := 0; i < min(mr, mb-ir); i++ {
							row := c[off+i*n : off+i*n+min(nr, nb-jr)]
							for j := range row {
								row[j] += tile[i*nr+j]
							}
						}
					}
				}
			}
		}
	}
	return nil
}

// packA copies rows i0.. i0+mb and columns p0.. p0+kb of a (leading
// dimension lda) into micro-panels of mr rows: panel r, step p, row i at
// r*kb + p*mr + i. Rows past mb are zero.
func packA(dst, a []float64, lda, i0, p0, mb, kb, mr int) {
	for r := 0; r < mb; r += mr {
		panel := dst[r*kb : (r+mr)*kb]
		rows := min(mr, mb-r)
		for i := 0; i < mr; i++ {
			if i >= rows {
				for p := 0; p < kb; p++ {
					panel[p*mr+i] = 0
				}
				continue
			}
			src := a[(i0+r+i)*lda+p0 : (i0+r+i)*lda+p0+kb]
			for p, v := range src {
				panel[p*mr+i] = v
			}
		}
	}
}

// packB copies rows p0.. p0+kb and columns j0.. j0+nb of b (leading
// dimension ldb) into micro-panels of nr columns: panel c, step p, column j
// at c*kb + p*nr + j. Columns past nb are zero.
func packB(dst, b []float64, ldb, p0, j0, kb, nb, nr int) {
	for c := 0; c < nb; c += nr {
		panel := dst[c*kb : (c+nr)*kb]
		cols := min(nr, nb-c)
		for p := 0; p < kb; p++ {
			src := b[(p0+p)*ldb+j0+c : (p0+p)*ldb+j0+c+cols]
			row := panel[p*nr : p*nr+nr]
			copy(row, src)
			clear(row[cols:])
		}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

func grow(p *[]float64, n int) []float64 {
	if cap(*p) < n {
		*p = make([]float64, n)
	}
	return (*p)[:n]
}

// gemmInt computes c += a·b for int64 matrices (exact, wrapping on
// overflow), row by row so the inner loop streams rows of b and c.
func gemmInt(m, n, k int, a, b, c []int64, check func() error) error {
	for i := 0; i < m; i++ {
		if i%16 == 0 {
			if err := check(); err != nil {
				return err
			}
		}
		crow := c[i*n : i*n+n]
		for p := 0; p < k; p++ {
			s := a[i*k+p]
			if s == 0 {
				continue
			}
			brow := b[p*n : p*n+n]
			for j := range crow {
				crow[j] += s * brow[j]
			}
		}
	}
	return nil
}
