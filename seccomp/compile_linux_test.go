package seccomp

import (
	"testing"
	"unsafe"
)

func TestCompileBuiltins(t *testing.T) {
	for _, name := range Names() {
		p, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := Compile(p)
		if err != nil {
			t.Fatalf("compile %s: %v", name, err)
		}
		t.Logf("%s: %d BPF instructions", name, prog.Instructions())
	}
}

func TestNotifyABISizes(t *testing.T) {
	// The sizes encoded in SECCOMP_IOCTL_NOTIF_RECV (0x50) and _SEND (0x18).
	if s := unsafe.Sizeof(notifReq{}); s != 0x50 {
		t.Errorf("sizeof(seccomp_notif) = %#x, want 0x50", s)
	}
	if s := unsafe.Sizeof(notifResp{}); s != 0x18 {
		t.Errorf("sizeof(seccomp_notif_resp) = %#x, want 0x18", s)
	}
}
