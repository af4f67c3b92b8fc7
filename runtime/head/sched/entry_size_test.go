package sched

import (
	"testing"
	"unsafe"
)

// TestEntrySize: a queue entry stays 32 bytes on 64-bit machines (one
// per queued subtask; the order of its fields decides its padding).
func TestEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("not a 64-bit machine")
	}
	if got := unsafe.Sizeof(entry{}); got != 32 {
		t.Errorf("entry is %d bytes, want 32", got)
	}
}
