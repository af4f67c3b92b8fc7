//go:build goexperiment.simd && amd64

package tensor

import "simd/archsimd"

// With GOEXPERIMENT=simd (Go 1.26's simd/archsimd), matmul uses vector
// micro-kernels: 4×16 with AVX-512, 4×8 with AVX2 and FMA. Each lane does
// the same fused multiply-adds in the same order as the portable kernel
// compiled with FMA (GOAMD64=v3), so the choice changes speed only.

func init() {
	if archsimd.X86.AVX512() {
		simdKernels = append(simdKernels, microKernel{mr: 4, nr: 16, run: micro4x16, name: "avx512-4x16"})
	}
	if archsimd.X86.AVX2() && archsimd.X86.FMA() {
		simdKernels = append(simdKernels, microKernel{mr: 4, nr: 8, run: micro4x8, name: "avx2-4x8"})
	}
	if len(simdKernels) > 0 {
		gemmKernel = simdKernels[0]
	}
}

func micro4x16(kb int, a, b, c []float64, ldc int) {
	var c00, c01, c10, c11, c20, c21, c30, c31 archsimd.Float64x8
	a, b = a[:4*kb], b[:16*kb]
	for p := 0; p < kb; p++ {
		bp := b[16*p : 16*p+16 : 16*p+16]
		b0 := archsimd.LoadFloat64x8Slice(bp)
		b1 := archsimd.LoadFloat64x8Slice(bp[8:])
		ap := a[4*p : 4*p+4 : 4*p+4]
		a0 := archsimd.BroadcastFloat64x8(ap[0])
		c00, c01 = a0.MulAdd(b0, c00), a0.MulAdd(b1, c01)
		a1 := archsimd.BroadcastFloat64x8(ap[1])
		c10, c11 = a1.MulAdd(b0, c10), a1.MulAdd(b1, c11)
		a2 := archsimd.BroadcastFloat64x8(ap[2])
		c20, c21 = a2.MulAdd(b0, c20), a2.MulAdd(b1, c21)
		a3 := archsimd.BroadcastFloat64x8(ap[3])
		c30, c31 = a3.MulAdd(b0, c30), a3.MulAdd(b1, c31)
	}
	for i, acc := range [4][2]archsimd.Float64x8{{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}} {
		row := c[i*ldc : i*ldc+16 : i*ldc+16]
		archsimd.LoadFloat64x8Slice(row).Add(acc[0]).StoreSlice(row)
		archsimd.LoadFloat64x8Slice(row[8:]).Add(acc[1]).StoreSlice(row[8:])
	}
}

func micro4x8(kb int, a, b, c []float64, ldc int) {
	var c00, c01, c10, c11, c20, c21, c30, c31 archsimd.Float64x4
	a, b = a[:4*kb], b[:8*kb]
	for p := 0; p < kb; p++ {
		bp := b[8*p : 8*p+8 : 8*p+8]
		b0 := archsimd.LoadFloat64x4Slice(bp)
		b1 := archsimd.LoadFloat64x4Slice(bp[4:])
		ap := a[4*p : 4*p+4 : 4*p+4]
		a0 := archsimd.BroadcastFloat64x4(ap[0])
		c00, c01 = a0.MulAdd(b0, c00), a0.MulAdd(b1, c01)
		a1 := archsimd.BroadcastFloat64x4(ap[1])
		c10, c11 = a1.MulAdd(b0, c10), a1.MulAdd(b1, c11)
		a2 := archsimd.BroadcastFloat64x4(ap[2])
		c20, c21 = a2.MulAdd(b0, c20), a2.MulAdd(b1, c21)
		a3 := archsimd.BroadcastFloat64x4(ap[3])
		c30, c31 = a3.MulAdd(b0, c30), a3.MulAdd(b1, c31)
	}
	for i, acc := range [4][2]archsimd.Float64x4{{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}} {
		row := c[i*ldc : i*ldc+8 : i*ldc+8]
		archsimd.LoadFloat64x4Slice(row).Add(acc[0]).StoreSlice(row)
		archsimd.LoadFloat64x4Slice(row[4:]).Add(acc[1]).StoreSlice(row[4:])
	}
}
