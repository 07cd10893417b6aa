package bpf

import (
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEncodeDecode(t *testing.T) {
	f := []unix.SockFilter{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, Jf: 2, K: 0xc000003e}, {Code: 0x6, K: 0x7fff0000}}
	got, err := Decode(Encode(f))
	if err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, make([]byte, 8*(unix.BPF_MAXINSNS+1))} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode accepted %d bytes", len(bad))
		}
	}
}
