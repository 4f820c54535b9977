package engine

import "unsafe"

// uintptrOf returns the address of a slice's first byte, for alignment.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
