package seccomp

import (
	"reflect"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	if got, want := Names(), []string{"python", "strict"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

func TestLookupUnknownNameListsTheNames(t *testing.T) {
	_, err := Lookup("pyhton")
	if err == nil || !strings.Contains(err.Error(), `"pyhton"`) || !strings.Contains(err.Error(), "python, strict") {
		t.Errorf("Lookup(pyhton) error = %v, want one naming the input and listing python, strict", err)
	}
}

func TestLookupEmptyIsDefault(t *testing.T) {
	p, err := Lookup("")
	if err != nil || p.Name != DefaultPolicy {
		t.Errorf("Lookup(\"\") = %v, %v; want %s", p, err, DefaultPolicy)
	}
}

func TestLookupReturnsACopy(t *testing.T) {
	p, _ := Lookup("python")
	p.Allow = append(p.Allow[:0], "mount")
	p.Refuse = nil
	q, _ := Lookup("python")
	if q.Allow[0] == "mount" || !q.Refused("mount") {
		t.Error("changing a looked-up policy changed the built-in one")
	}
}

func TestBuiltinPoliciesValidate(t *testing.T) {
	for _, name := range Names() {
		p, _ := Lookup(name)
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	base := func() *Policy {
		return &Policy{Name: "t", Allow: []string{"read"}, Refuse: []Group{{Why: "x", Calls: []string{"mount"}}}}
	}
	cases := map[string]func(p *Policy){
		"allowed and refused": func(p *Policy) { p.Allow = append(p.Allow, "mount") },
		"allowed twice":       func(p *Policy) { p.Allow = append(p.Allow, "read") },
		"ruled and allowed":   func(p *Policy) { p.AllowIf = []Rule{{Syscall: "read", Args: []ArgRule{{Index: 0, Only: Values(1)}}}} },
		"rule without args":   func(p *Policy) { p.AllowIf = []Rule{{Syscall: "ioctl"}} },
		"rule with both sides": func(p *Policy) {
			p.AllowIf = []Rule{{Syscall: "ioctl", Args: []ArgRule{{Index: 1, Only: Values(1), Never: Values(2)}}}}
		},
		"rule with no side": func(p *Policy) { p.AllowIf = []Rule{{Syscall: "ioctl", Args: []ArgRule{{Index: 1}}}} },
		"argument 6":        func(p *Policy) { p.AllowIf = []Rule{{Syscall: "ioctl", Args: []ArgRule{{Index: 6, Only: Values(1)}}}} },
		"two rules on one arg": func(p *Policy) {
			p.AllowIf = []Rule{{Syscall: "ioctl", Args: []ArgRule{{Index: 1, Only: Values(1)}, {Index: 1, Only: Values(2)}}}}
		},
		"absent and refused": func(p *Policy) { p.Absent = []Group{{Calls: []string{"mount"}}} },
		"empty name":         func(p *Policy) { p.Allow = append(p.Allow, "") },
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("base policy: %v", err)
	}
	for name, mutate := range cases {
		p := base()
		mutate(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

// issueNeverAllowed is the list from the issue: no policy may allow these.
var issueNeverAllowed = []string{
	"mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"mount_setattr", "unshare", "setns", "pivot_root", "chroot", "ptrace", "process_vm_readv",
	"process_vm_writev", "bpf", "perf_event_open", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "userfaultfd", "keyctl", "add_key", "request_key", "kexec_load",
	"kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
	"swapoff", "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "acct", "quotactl",
	"open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "syslog", "lookup_dcookie",
	"vhangup", "nfsservctl", "seccomp", "pidfd_getfd",
}

func TestNeverAllowedIsRefusedEverywhere(t *testing.T) {
	for _, name := range Names() {
		p, _ := Lookup(name)
		for _, c := range issueNeverAllowed {
			if !p.Refused(c) {
				t.Errorf("%s does not refuse %s", name, c)
			}
		}
	}
}

// TestStrictIsTighter: strict allows nothing python refuses.
func TestStrictIsTighter(t *testing.T) {
	py, _ := Lookup("python")
	st, _ := Lookup("strict")
	allowed := map[string]bool{}
	for _, c := range py.Allow {
		allowed[c] = true
	}
	for _, r := range py.AllowIf {
		allowed[r.Syscall] = true
	}
	for _, c := range st.Allow {
		if !allowed[c] {
			t.Errorf("strict allows %s, which python does not", c)
		}
	}
}
