package cluster

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type fakeLocal struct{ free, slots int }

func (f fakeLocal) ServeTenant(http.ResponseWriter, *http.Request, string, string) {}
func (f fakeLocal) FreeSlots() int                                                 { return f.free }
func (f fakeLocal) Slots() int                                                     { return f.slots }
func (f fakeLocal) PoolReady() int                                                 { return 0 }
func (f fakeLocal) EndSessions(string) int                                         { return 0 }
func (f fakeLocal) LiveSessions() int                                              { return 0 }
func (f fakeLocal) Logf(string, ...any)                                            {}

// A restarted node pulled work before its first heartbeat was stored (a
// prototype's bug): then no gateway could tell it from the node it
// replaced. It pulls only when up, its current heartbeat stored, and a
// slot free.
func TestNodePullsOnlyAfterItsHeartbeatIsStored(t *testing.T) {
	n := &Node{local: fakeLocal{free: 2, slots: 2}, state: StateUp}
	if n.canPull() {
		t.Error("pulls before any heartbeat was stored")
	}
	n.stored = true
	if !n.canPull() {
		t.Error("does not pull with its heartbeat stored and slots free")
	}
	n.inflight.Store(2)
	if n.canPull() {
		t.Error("pulls with every slot taken by its own runs")
	}
	n.inflight.Store(0)
	n.local = fakeLocal{free: 0, slots: 2}
	if n.canPull() {
		t.Error("pulls while its server has no free slot")
	}
	n.local = fakeLocal{free: 2, slots: 2}
	for _, s := range []string{StateFenced, StateDraining, StateStopped} {
		n.state = s
		if n.canPull() {
			t.Errorf("pulls while %s", s)
		}
	}
}

func TestLoadRefusesWhatIsNotSafe(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{`{"urls":["nats://h:4222"],"ca":"ca.pem","node":"h1"}`, "only tls://"},
		{`{"urls":["tls://h:4222"],"node":"h1"}`, "ca:"},
		{`{"urls":["tls://h:4222"],"ca":"ca.pem","node":"h1","passwrd":"x"}`, "unknown field"},
		{`{"urls":["tls://h:4222"],"ca":"ca.pem","node":"h.1"}`, "node:"},
		{`{"urls":["tls://h:4222"],"ca":"ca.pem","node":"h1","grace":"0s"}`, "positive duration"},
		{`{"urls":["tls://h:4222"],"ca":"ca.pem","node":"h1","cert":"c.pem"}`, "cert and key"},
	} {
		p := filepath.Join(dir, "c.json")
		os.WriteFile(p, []byte(c.file), 0o600)
		if _, err := Load(p, true); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.file, err, c.want)
		}
	}
	p := filepath.Join(dir, "ok.json")
	os.WriteFile(p, []byte(`{"urls":["tls://h:4222"],"ca":"ca.pem","node":"h1"}`), 0o600)
	c, err := Load(p, true)
	if err != nil || c.Grace.D() != DefaultGrace || c.QueueMax != DefaultQueueMax {
		t.Errorf("a minimal file: %+v %v", c, err)
	}
}
