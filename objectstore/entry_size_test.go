package objectstore

import (
	"testing"
	"unsafe"
)

// TestEntrySize: an object's entry stays 112 bytes on 64-bit machines
// (one per object held, and up to maxSpare kept for reuse; the order of
// its fields decides its padding).
func TestEntrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("not a 64-bit machine")
	}
	if got := unsafe.Sizeof(entry{}); got != 112 {
		t.Errorf("entry is %d bytes, want 112", got)
	}
}
