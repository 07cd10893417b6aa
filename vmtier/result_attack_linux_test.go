package vmtier

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stockade/stockade/jail"
)

// TestAttackGuestResultPastItsBounds: a guest's Result claims a verdict
// of the VM tier's (vm_panic: the host's own observation, which the host
// would then print as measured) and carries each stream at ten times the
// output limit (within the reply's bound, which allows twelve). The host
// hands on neither: each stream is cut at the limit and said cut, and
// the verdict is an error naming what the guest claimed.
func TestAttackGuestResultPastItsBounds(t *testing.T) {
	spec := jail.Spec{OutputLimit: 1 << 10}
	for _, v := range []jail.Verdict{VerdictPanic, VerdictDied, "pwned\x1b[2J"} {
		res := &jail.Result{Verdict: v, Stdout: strings.Repeat("o", 10<<10), Stderr: strings.Repeat("e", 10<<10)}
		var out, errs bytes.Buffer
		got, err := (&tier{}).finish(spec, &Reply{Result: res}, jail.Streams{Stdout: &out, Stderr: &errs})
		if err != nil {
			t.Fatal(err)
		}
		if got.Verdict != jail.VerdictError || got.Error == nil || strings.ContainsRune(*got.Error, '\x1b') {
			t.Errorf("the guest's verdict %q: the host says %q (error %v)", v, got.Verdict, got.Error)
		}
		if len(got.Stdout) > 1<<10 || !got.StdoutTruncated || len(got.Stderr) > 1<<10 || !got.StderrTruncated {
			t.Errorf("streams of %d and %d bytes (cut %v, %v), limit %d", len(got.Stdout), len(got.Stderr), got.StdoutTruncated, got.StderrTruncated, 1<<10)
		}
		if out.Len() > 1<<10 || errs.Len() > 1<<10 {
			t.Errorf("the caller's streams got %d and %d bytes, limit %d", out.Len(), errs.Len(), 1<<10)
		}
	}
	// "ok" with a stream past the limit is the jail's "output".
	res := &jail.Result{Verdict: jail.VerdictOK, Stdout: strings.Repeat("o", 2<<10)}
	if got, _ := (&tier{}).finish(spec, &Reply{Result: res}, jail.Streams{}); got.Verdict != jail.VerdictOutput {
		t.Errorf("ok with its output cut: %q, want output", got.Verdict)
	}
	// A verdict a jail gives, within the limit, is handed on as it is.
	res = &jail.Result{Verdict: jail.VerdictExit, Stdout: "hi\n"}
	if got, _ := (&tier{}).finish(spec, &Reply{Result: res}, jail.Streams{}); got.Verdict != jail.VerdictExit || got.Stdout != "hi\n" || got.StdoutTruncated || got.Error != nil {
		t.Errorf("an honest result changed: %+v", got)
	}
}
