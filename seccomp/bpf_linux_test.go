package seccomp

import (
	"bytes"
	"testing"
)

// The embedded programs must be exactly what the policies compile to now:
// a policy edited without `go generate ./seccomp` would otherwise load the
// old filter.
func TestPrecompiledIsCurrent(t *testing.T) {
	for _, name := range Names() {
		p, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		pre, ok := Precompiled(name)
		if !ok {
			t.Fatalf("no precompiled program for %q: run go generate ./seccomp", name)
		}
		if !bytes.Equal(EncodeBPF(fresh.BPF()), EncodeBPF(pre.BPF())) {
			t.Fatalf("precompiled %q differs from its policy: run go generate ./seccomp", name)
		}
	}
}

func TestBPFRoundTrip(t *testing.T) {
	p, _ := Lookup("python")
	prog, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeBPF(EncodeBPF(prog.BPF()))
	if err != nil || len(f) != len(prog.BPF()) {
		t.Fatalf("round trip: %v, %d vs %d", err, len(f), len(prog.BPF()))
	}
	if _, err := DecodeBPF([]byte{1, 2, 3}); err == nil {
		t.Fatal("a truncated program decoded")
	}
	if _, err := ProgramFromBPF("x", nil); err == nil {
		t.Fatal("an empty program was accepted")
	}
}
