package dag

import (
	"bytes"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on x86-64 (and on arm64
// with 4 KiB pages).
const hugePage = 2 << 20

// thpMadvise reports whether transparent huge pages are set to
// "madvise": only then does advice change what the kernel maps.
var thpMadvise = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && bytes.Contains(b, []byte("[madvise]"))
})

// mapHuge maps the whole huge pages inside [p, p+n) as huge pages now
// (see HugePages). An error from madvise (a kernel without transparent
// huge pages) leaves small pages, as without it.
func mapHuge(p unsafe.Pointer, n uintptr) {
	if !thpMadvise() {
		return
	}
	a := uintptr(p)
	lo := (a + hugePage - 1) &^ (hugePage - 1)
	hi := (a + n) &^ (hugePage - 1)
	if lo >= hi {
		return
	}
	r := unsafe.Slice((*byte)(unsafe.Add(p, lo-a)), hi-lo)
	if syscall.Madvise(r, syscall.MADV_HUGEPAGE) != nil {
		return
	}
	for i := 0; i < len(r); i += hugePage {
		r[i] = 0 // a write fault: the kernel maps (and zeroes) a huge page
	}
	_ = syscall.Madvise(r, syscall.MADV_NOHUGEPAGE)
}
