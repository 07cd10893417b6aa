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
		{`{"urls":["tls://h:4222"],"ca":"ca.pem","node":"h1","results_max_bytes":8388608}`, "results_max_bytes"},
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
	if err != nil || c.Grace.D() != DefaultGrace || c.QueueMax != DefaultQueueMax || c.ResultsMaxBytes != DefaultResultsMaxBytes {
		t.Errorf("a minimal file: %+v %v", c, err)
	}
}

// A max_result whose answers NATS would not carry (its max_payload, 1MB
// unless nats.conf says more) left a session's caller waiting
// request_timeout for an answer never sent: it is refused at connect,
// with the reason and the fix.
func TestAttackMaxResultOverMaxPayload(t *testing.T) {
	c := Config{URLs: []string{"tls://h:4222"}, CA: "ca.pem"}
	if err := c.Validate(false); err != nil {
		t.Fatal(err)
	}
	err := c.checkPayload(1 << 20) // nats-server's default max_payload
	if err == nil || !strings.Contains(err.Error(), "max_payload") || !strings.Contains(err.Error(), "raise max_payload in nats.conf to at least") {
		t.Fatalf("the defaults (max_result %d) on a 1MB max_payload: %v, want refused with the fix", c.MaxResult, err)
	}
	// The payload needed is the base64 of the larger body and its envelope.
	if need := c.payloadNeeded(); need < c.MaxResult*4/3 || need > 16<<20 {
		t.Errorf("payload needed for max_result %d: %d", c.MaxResult, need)
	}
	if err := c.checkPayload(16 << 20); err != nil {
		t.Errorf("the defaults on a 16MB max_payload (docs/cluster.md): %v", err)
	}
	c.MaxResult, c.MaxRequest = 780<<10, 4<<10
	if err := c.checkPayload(1 << 20); err == nil {
		t.Errorf("max_result 780 KiB on a 1MB max_payload (base64: 1040 KiB): taken")
	}
}
