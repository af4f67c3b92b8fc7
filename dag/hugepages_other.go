//go:build !linux

package dag

import "unsafe"

func mapHuge(p unsafe.Pointer, n uintptr) {}
