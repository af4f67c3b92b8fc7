package dag

import "unsafe"

// hugeMin is the smallest table HugePages backs: below two huge pages
// (2 MiB each on x86-64) a table holds at most one whole huge page, and
// the system calls cost more than the page faults they spare.
const hugeMin = 4 << 20

// HugePages returns s, a table fresh from make that is about to be
// filled, with its memory (up to its capacity) mapped in huge pages where
// the system allows: the elements are unchanged (zero). Call it before
// anything is written to s, on element types without pointers.
//
// Why: filling a table pays a page fault for every 4 KiB of fresh memory.
// Lowering ten million subtasks fills some 2 GB of tables, half a million
// faults, and on a virtual machine a fault costs several microseconds:
// in a fresh process that was as long as the work. A huge page is one
// fault every 2 MiB.
//
// On Linux with transparent huge pages set to "madvise", HugePages asks
// for huge pages on the table's whole huge pages (MADV_HUGEPAGE), writes
// one byte of each so that the kernel maps them now, and then takes the
// advice back (MADV_NOHUGEPAGE), so that the range is as the Go runtime
// left it: otherwise, once the table is freed and its pages returned to
// the system, khugepaged would collapse what little of the range is in
// use again back into huge pages, and the process would keep memory the
// runtime gave back (the reason Go 1.21.1 stopped advising huge pages on
// its heap). With "always" the kernel maps huge pages anyway and with
// "never" it does not; HugePages then does nothing, as on other systems.
func HugePages[S ~[]E, E any](s S) S {
	var e E
	if n := uintptr(cap(s)) * unsafe.Sizeof(e); n >= hugeMin {
		mapHuge(unsafe.Pointer(unsafe.SliceData(s)), n)
	}
	return s
}
