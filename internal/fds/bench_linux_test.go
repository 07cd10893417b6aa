package fds

import "testing"

// What the two steps cost a jail's init: the table is short there (0-3 and
// Go's own), as it is in this process.
func BenchmarkCloseInheritedNothingInherited(b *testing.B) {
	// Only descriptors this process marked: nothing is closed, all is read.
	if err := CloseOnExecFrom(3); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := CloseInherited(3); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCloseOnExecFrom(b *testing.B) {
	for b.Loop() {
		if err := CloseOnExecFrom(3); err != nil {
			b.Fatal(err)
		}
	}
}
