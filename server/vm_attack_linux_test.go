package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/vmtier"
)

// These tests put a hostile guest behind a vm profile's sessions: a fake
// of the guest's side of the channel that answers what it likes. No VM
// boots; what they check is the host's side, which holds whatever the
// guest says to its bounds and keeps its own word on the session.

// fakeGuest answers every call with answer(call's method, path, body).
type fakeGuest struct {
	answer func(method, path string, body []byte) (int, io.Reader)
	mu     sync.Mutex
	calls  []string
	done   chan struct{}
	once   sync.Once
	closed bool
	// network, set, is the host's proxy's list for the guest (Network).
	network func() []jail.NetworkDecision
	ctype   string // every answer's Content-Type; "" is application/json
}

func newFakeGuest(answer func(method, path string, body []byte) (int, io.Reader)) *fakeGuest {
	return &fakeGuest{answer: answer, done: make(chan struct{})}
}

func (g *fakeGuest) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	g.mu.Lock()
	g.calls = append(g.calls, r.Method+" "+r.URL.Path)
	g.mu.Unlock()
	status, rd := g.answer(r.Method, r.URL.Path, body)
	ct := "application/json"
	if g.ctype != "" {
		ct = g.ctype
	}
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(rd), Request: r}, nil
}

func (g *fakeGuest) Serve(vmtier.ServePlan) error { return nil }
func (g *fakeGuest) Done() <-chan struct{}        { return g.done }
func (g *fakeGuest) Err() error                   { return nil }
func (g *fakeGuest) Network() []jail.NetworkDecision {
	if g.network == nil {
		return nil
	}
	return g.network()
}
func (g *fakeGuest) Close() error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.once.Do(func() { close(g.done) })
	return nil
}

func (g *fakeGuest) wasClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

func (g *fakeGuest) callsTo() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.calls...)
}

// vmTestServer is a server offering the vm profile "vm" whose guests are
// made by guest, called once per session (no warm pool).
func vmTestServer(t *testing.T, guest func() *fakeGuest) *Server {
	t.Helper()
	p := profiles.Defaults().Clone()
	if err := p.Set(profiles.FieldIsolation, profiles.IsolationVM, profiles.Origin{File: "test"}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Profiles: []Profile{{Name: "vm", Policy: p}}, Host: jail.Host{NoCgroup: true}, VMPool: 0})
	if err != nil {
		t.Fatal(err)
	}
	s.vmBoot = func(context.Context, jail.Spec) (vmGuest, error) { return guest(), nil }
	return s
}

// as calls s's routes as uid.
func as(s *Server, uid uint32, method, path string, body any) (int, []byte) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	r := httptest.NewRequest(method, "http://stockade"+path, rd)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, peer{uid: uid, pid: 1}))
	w := httptest.NewRecorder()
	s.handler().ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// liar is a guest whose server names its session "guestid" whatever
// the host asks, says it lives until 2099 under another profile, and
// answers an exec with which guest it is.
func liar(name string) func(method, path string, body []byte) (int, io.Reader) {
	const guestID = "0123456789abcdef0123456789abcdef"
	far := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	return func(method, path string, body []byte) (int, io.Reader) {
		switch {
		case method == "POST" && path == "/v1/sessions":
			b, _ := json.Marshal(api.SessionCreated{SessionID: guestID, Profile: "other", ExpiresAt: far})
			return 201, bytes.NewReader(b)
		case strings.HasSuffix(path, "/exec"):
			b, _ := json.Marshal(map[string]any{"verdict": "ok", "stdout": name, "session": api.SessionState{ID: guestID, Alive: true, ExpiresAt: far}})
			return 200, bytes.NewReader(b)
		default:
			b, _ := json.Marshal(api.SessionInfo{SessionID: guestID, Profile: "other", Alive: true, ExpiresAt: far})
			return 200, bytes.NewReader(b)
		}
	}
}

// TestAttackVMGuestNamesSession: two guests that both name their session
// the same id, and claim a lifetime to 2099, get two sessions with the
// host's ids, each reaching its own guest, each its owner's alone, with
// the host's expiry in every answer.
func TestAttackVMGuestNamesSession(t *testing.T) {
	var guests []*fakeGuest
	s := vmTestServer(t, func() *fakeGuest {
		g := newFakeGuest(liar(fmt.Sprintf("guest %d", len(guests))))
		guests = append(guests, g)
		return g
	})
	var ids []string
	var expires []time.Time
	for uid := uint32(1000); uid < 1002; uid++ {
		code, body := as(s, uid, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm", TTL: "10m"})
		var c api.SessionCreated
		if code != 201 || json.Unmarshal(body, &c) != nil {
			t.Fatalf("create as uid %d: %d %s", uid, code, body)
		}
		if c.SessionID == "0123456789abcdef0123456789abcdef" || c.Profile != "vm" || c.ExpiresAt.Year() == 2099 {
			t.Fatalf("the host answered the guest's word: %+v", c)
		}
		ids, expires = append(ids, c.SessionID), append(expires, c.ExpiresAt)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two sessions, one id %s", ids[0])
	}
	for i, id := range ids {
		uid := uint32(1000 + i)
		code, body := as(s, uid, "POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("1")})
		var r struct {
			Stdout  string           `json:"stdout"`
			Session api.SessionState `json:"session"`
		}
		if code != 200 || json.Unmarshal(body, &r) != nil {
			t.Fatalf("exec in %s: %d %s", id, code, body)
		}
		if want := fmt.Sprintf("guest %d", i); r.Stdout != want {
			t.Errorf("exec in session %d reached %q, want %q", i, r.Stdout, want)
		}
		if r.Session.ID != id || !r.Session.ExpiresAt.Equal(expires[i]) {
			t.Errorf("exec's session: %+v, want id %s expiring %v (the host's)", r.Session, id, expires[i])
		}
		code, body = as(s, uid, "GET", "/v1/sessions/"+id, nil)
		var in api.SessionInfo
		if code != 200 || json.Unmarshal(body, &in) != nil || in.SessionID != id || in.Profile != "vm" || !in.ExpiresAt.Equal(expires[i]) {
			t.Errorf("GET the session: %d %s", code, body)
		}
		// The other uid: no such session, and its guest hears nothing.
		before := len(guests[i].callsTo())
		if code, _ := as(s, uid^1, "POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr("1")}); code != 404 {
			t.Errorf("exec in uid %d's session as uid %d: %d, want 404", uid, uid^1, code)
		}
		if after := len(guests[i].callsTo()); after != before {
			t.Errorf("another uid's call reached the guest: %v", guests[i].callsTo()[before:])
		}
	}
	for i, id := range ids {
		if code, body := as(s, uint32(1000+i), "DELETE", "/v1/sessions/"+id, nil); code != 200 {
			t.Errorf("DELETE: %d %s", code, body)
		}
		if !guests[i].wasClosed() {
			t.Errorf("guest %d not ended by DELETE", i)
		}
	}
}

// TestAttackVMGuestAnswerPastBound: a guest whose answer to an exec
// never ends is read no further than the bound; the session ends (410
// from then on) and its guest with it.
func TestAttackVMGuestAnswerPastBound(t *testing.T) {
	var g *fakeGuest
	s := vmTestServer(t, func() *fakeGuest {
		g = newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			if method == "POST" && path == "/v1/sessions" {
				b, _ := json.Marshal(api.SessionCreated{SessionID: "ab"})
				return 201, bytes.NewReader(b)
			}
			return 200, io.MultiReader(strings.NewReader(`{"stdout":"`), endless{})
		})
		return g
	})
	code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	code, body = as(s, 1000, "POST", "/v1/sessions/"+c.SessionID+"/exec", api.ExecRequest{Code: ptr("1")})
	if code != 410 || len(body) > 4096 {
		t.Fatalf("exec whose answer never ends: %d, %d bytes, want 410 and a short reason", code, len(body))
	}
	if !g.wasClosed() {
		t.Error("the guest outlived its session")
	}
	if code, _ := as(s, 1000, "GET", "/v1/sessions/"+c.SessionID, nil); code != 410 {
		t.Errorf("GET after: %d, want 410", code)
	}
}

// endless is a reader that never ends: 'a' without end.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// TestVMSessionHostDecidesItsEnd: the host's clock ends a session at its
// ttl, and a guest that goes away ends its session (410) at once.
func TestVMSessionHostDecidesItsEnd(t *testing.T) {
	var guests []*fakeGuest
	s := vmTestServer(t, func() *fakeGuest {
		g := newFakeGuest(liar("g"))
		guests = append(guests, g)
		return g
	})
	var ids []string
	for range 2 {
		code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm", TTL: "1m"})
		var c api.SessionCreated
		if code != 201 || json.Unmarshal(body, &c) != nil {
			t.Fatalf("create: %d %s", code, body)
		}
		ids = append(ids, c.SessionID)
	}
	s.vmJanitor(time.Now().Add(2 * time.Minute))
	code, body := as(s, 1000, "GET", "/v1/sessions/"+ids[0], nil)
	if code != 410 || !strings.Contains(string(body), string(api.SessionTTL)) || !guests[0].wasClosed() {
		t.Errorf("past its ttl (the guest says 2099): %d %s, guest closed %v", code, body, guests[0].wasClosed())
	}
	// The janitor ended both; a third session's guest dies under it.
	code, body = as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	guests[2].Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if code, _ = as(s, 1000, "GET", "/v1/sessions/"+c.SessionID, nil); code == 410 {
			return
		}
	}
	t.Errorf("a session whose guest ended: %d, want 410", code)
}

// TestVMRunInItsOwnGuest: POST /v1/run of a vm profile goes to a guest
// of its own, made for it and ended with the answer, which carries the
// host's word on the pool.
func TestVMRunInItsOwnGuest(t *testing.T) {
	var guests []*fakeGuest
	s := vmTestServer(t, func() *fakeGuest {
		g := newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			if method != "POST" || path != "/v1/run" || !bytes.Contains(body, []byte("print(6*7)")) || bytes.Contains(body, []byte(`"profile"`)) {
				return 400, strings.NewReader(`{"error":"unexpected call"}`)
			}
			b, _ := json.Marshal(api.RunResponse{Result: &api.Result{Verdict: "ok", Stdout: "42\n"}, Pool: api.PoolUse{Hit: true, WaitedMs: -1}})
			return 200, bytes.NewReader(b)
		})
		guests = append(guests, g)
		return g
	})
	code, body := as(s, 1000, "POST", "/v1/run", api.RunRequest{Code: ptr("print(6*7)"), Profile: "vm"})
	var r api.RunResponse
	if code != 200 || json.Unmarshal(body, &r) != nil || r.Result == nil || r.Stdout != "42\n" {
		t.Fatalf("POST /v1/run: %d %s", code, body)
	}
	if r.Pool.Hit || r.Pool.WaitedMs < 0 || r.Pool.Reason != "no pool" {
		t.Errorf("pool: %+v, want the host's (no pool)", r.Pool)
	}
	if len(guests) != 1 || !guests[0].wasClosed() {
		t.Errorf("want one guest, ended with the answer: %d, closed %v", len(guests), len(guests) > 0 && guests[0].wasClosed())
	}
}

// TestVMSessionThroughMCPBackend: /v1/mcp's tools reach a vm session
// through its routes: made, an exec answered by its guest, a file
// written and read, closed, and then gone (410).
func TestVMSessionThroughMCPBackend(t *testing.T) {
	var g *fakeGuest
	files := map[string][]byte{}
	s := vmTestServer(t, func() *fakeGuest {
		g = newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			switch {
			case method == "POST" && path == "/v1/sessions":
				return 201, strings.NewReader(`{"session_id":"ab"}`)
			case strings.HasSuffix(path, "/exec"):
				return 200, strings.NewReader(`{"verdict":"ok","stdout":"in the guest\n","session":{"session_id":"ab"}}`)
			case method == "PUT" && strings.HasPrefix(path, "/v1/sessions/ab/files/"):
				files[strings.TrimPrefix(path, "/v1/sessions/ab/files/")] = body
				return 201, strings.NewReader(fmt.Sprintf(`{"path":"x","bytes":%d}`, len(body)))
			case method == "GET" && strings.HasPrefix(path, "/v1/sessions/ab/files/"):
				return 200, bytes.NewReader(files[strings.TrimPrefix(path, "/v1/sessions/ab/files/")])
			case method == "DELETE":
				return 200, strings.NewReader(`{"session_id":"ab","verdict":"closed"}`)
			}
			return 404, strings.NewReader(`{"error":"no"}`)
		})
		return g
	})
	var audit bytes.Buffer
	s.cfg.Audit = NewAuditWriter(&audit)
	m := &mcpCaller{s: s, caller: peer{uid: 1000, pid: 1}}
	ctx := context.Background()
	created, err := m.CreateSession(ctx, &api.SessionRequest{Profile: "vm"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Exec(ctx, created.SessionID, &api.ExecRequest{Code: ptr("print('x')")}, nil)
	if err != nil || res.Stdout != "in the guest\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if err := m.WriteFile(ctx, created.SessionID, "a.txt", []byte("data")); err != nil {
		t.Fatalf("write: %v", err)
	}
	f, _, err := m.OpenFile(ctx, created.SessionID, "a.txt")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "data" {
		t.Fatalf("read back %q", b)
	}
	end, err := m.CloseSession(ctx, created.SessionID)
	if err != nil || end.SessionID != created.SessionID || !g.wasClosed() {
		t.Fatalf("close: %+v %v, guest closed %v", end, err, g.wasClosed())
	}
	if _, err := m.Exec(ctx, created.SessionID, &api.ExecRequest{Code: ptr("1")}, nil); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("exec after close: %v, want the session ended", err)
	}
	// The audit log has the session's lines, by the host's id.
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(audit.String()), "\n") {
		var e AuditEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.SessionID != created.SessionID || e.UID != 1000 {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if e.Event == "exec_start" && e.CodeSHA256 == "" {
			t.Errorf("exec_start without the code's hash: %s", line)
		}
		events = append(events, e.Event)
	}
	if got := strings.Join(events, " "); got != "session_start exec_start exec_end session_end" {
		t.Errorf("audit events: %s", got)
	}
}

// TestAttackVMGuestHidesSessionFromList: a guest that does not answer
// the host's GET for its session (busy, broken, or made so by what runs
// in it) left the session out of its owner's GET /v1/sessions, which is
// what a gateway counts a tenant's max_sessions by: each session whose
// guest kept quiet was one more past the quota. The host lists every
// session it holds for the owner, in its own words when the guest has
// none.
func TestAttackVMGuestHidesSessionFromList(t *testing.T) {
	s := vmTestServer(t, func() *fakeGuest {
		lie := liar("quiet")
		return newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			if method == "GET" {
				return 503, strings.NewReader(`{"error":"busy"}`)
			}
			return lie(method, path, body)
		})
	})
	var ids []string
	for range 2 {
		code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm", TTL: "10m"})
		var c api.SessionCreated
		if code != 201 || json.Unmarshal(body, &c) != nil {
			t.Fatalf("create: %d %s", code, body)
		}
		ids = append(ids, c.SessionID)
	}
	code, body := as(s, 1000, "GET", "/v1/sessions", nil)
	var list struct {
		Sessions []api.SessionInfo `json:"sessions"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	got := map[string]bool{}
	for _, in := range list.Sessions {
		got[in.SessionID] = true
		if in.Profile != "vm" {
			t.Errorf("listed %s with profile %q, want vm", in.SessionID, in.Profile)
		}
	}
	for _, id := range ids {
		if !got[id] {
			t.Errorf("session %s, whose guest did not answer, left out of its owner's list %s", id, body)
		}
	}
	if code, body := as(s, 1001, "GET", "/v1/sessions", nil); code != 200 || strings.Contains(string(body), ids[0]) {
		t.Errorf("another uid's list: %d %s", code, body)
	}
	for _, id := range ids {
		as(s, 1000, "DELETE", "/v1/sessions/"+id, nil)
	}
}

// TestAttackVMGuestsPastMemoryBudget: a vm session's guest holds on the
// host its RAM (the profile's memory, the guest's kernel and init, the
// root image) and its VMM: a cgroup of far more than the profile's
// memory. The budget must be charged what the VMM's cgroup may hold, not
// the profile's memory, or two callers make serve hold twice its
// --budget-memory: with a budget of one guest's VMM and one profile's
// memory more, the second session is refused.
func TestAttackVMGuestsPastMemoryBudget(t *testing.T) {
	p := profiles.Defaults().Clone()
	if err := p.Set(profiles.FieldIsolation, profiles.IsolationVM, profiles.Origin{File: "test"}); err != nil {
		t.Fatal(err)
	}
	spec := p.Spec(nil, jail.Host{NoCgroup: true})
	mem := spec.Cgroup.MemoryMax
	if mem <= 0 {
		t.Fatalf("the default profile has no memory limit (%d)", mem)
	}
	s, err := New(Config{Profiles: []Profile{{Name: "vm", Policy: p}}, Host: jail.Host{NoCgroup: true}, VMPool: 0, BudgetMemory: vmtier.HostMemory(spec, vmtier.Options{}) + mem})
	if err != nil {
		t.Fatal(err)
	}
	var guests []*fakeGuest
	s.vmBoot = func(context.Context, jail.Spec) (vmGuest, error) {
		g := newFakeGuest(liar("g"))
		guests = append(guests, g)
		return g, nil
	}
	code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("the first session: %d %s", code, body)
	}
	used, _ := s.budget.Used()
	if want := s.vmCharge["vm"]; used != want || want <= mem {
		t.Errorf("one guest holds %d bytes of the budget, want %d (its VMM's cgroup, over the profile's %d)", used, want, mem)
	}
	if code, body := as(s, 1001, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"}); code != 503 {
		t.Errorf("a second guest within a budget of one guest's VMM and the profile's memory: %d %s, want 503 (%d guests booted)", code, body, len(guests))
	}
	if code, body := as(s, 1000, "DELETE", "/v1/sessions/"+c.SessionID, nil); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if used, _ := s.budget.Used(); used != 0 {
		t.Errorf("after DELETE the budget holds %d bytes, want 0", used)
	}
}

// TestAttackVMGuestHoldsCallsInFlight: every call to a session's guest
// holds on the host what the guest answers, up to the answer's bound,
// read whole, and copied again for the host's view; the guest answers
// when it likes. A caller's connections (128 by default) each with a
// call in flight on one session, answered at the bound all at once,
// would make the host hold that many answers: the calls in flight on a
// session are bounded, the others refused (429) without reaching the
// guest, and DELETE still ends the session.
func TestAttackVMGuestHoldsCallsInFlight(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight, most := 0, 0
	s := vmTestServer(t, func() *fakeGuest {
		lie := liar("g")
		return newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			if method != "GET" || path == "/v1/sessions" {
				return lie(method, path, body)
			}
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			<-release
			mu.Lock()
			inFlight--
			mu.Unlock()
			return lie(method, path, body)
		})
	})
	code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	const calls = 3 * vmCallsInFlight
	codes := make(chan int, calls)
	for range calls {
		go func() {
			code, _ := as(s, 1000, "GET", "/v1/sessions/"+c.SessionID, nil)
			codes <- code
		}()
	}
	// The refused answer at once; the others wait in the guest.
	refused := 0
	deadline := time.After(30 * time.Second)
	for waiting := false; !waiting; {
		select {
		case code := <-codes:
			if code != 429 {
				t.Errorf("a call answered %d while the guest held the others, want 429", code)
			}
			refused++
		case <-deadline:
			t.Fatalf("after 30 s: %d refused, %d in the guest", refused, most)
		case <-time.After(20 * time.Millisecond):
		}
		mu.Lock()
		waiting = refused+inFlight == calls || most > vmCallsInFlight
		mu.Unlock()
	}
	if code, body := as(s, 1000, "DELETE", "/v1/sessions/"+c.SessionID, nil); code != 200 {
		t.Errorf("DELETE with the guest holding calls: %d %s", code, body)
	}
	close(release)
	for range calls - refused {
		<-codes
	}
	if most > vmCallsInFlight || refused != calls-vmCallsInFlight {
		t.Errorf("%d calls in the guest at once (%d refused), want at most %d", most, refused, vmCallsInFlight)
	}
}

// TestAttackVMWarmGuestsPastMemoryBudget: the warm pool's guests are
// charged as a session's: with a budget of one guest's VMM, a pool of two
// keeps one guest waiting, charged its VMM, not two charged the profile's
// memory.
func TestAttackVMWarmGuestsPastMemoryBudget(t *testing.T) {
	p := profiles.Defaults().Clone()
	if err := p.Set(profiles.FieldIsolation, profiles.IsolationVM, profiles.Origin{File: "test"}); err != nil {
		t.Fatal(err)
	}
	charge := vmtier.HostMemory(p.Spec(nil, jail.Host{NoCgroup: true}), vmtier.Options{})
	s, err := New(Config{Profiles: []Profile{{Name: "vm", Policy: p}}, Host: jail.Host{NoCgroup: true}, VMPool: 2, BudgetMemory: charge})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	booted := 0
	s.vmBoot = func(context.Context, jail.Spec) (vmGuest, error) {
		mu.Lock()
		booted++
		mu.Unlock()
		return newFakeGuest(liar("g")), nil
	}
	pl := s.vmPools["vm"]
	ctx, cancel := context.WithCancel(context.Background())
	go pl.Refill(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for pl.Snapshot().Ready < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // room for a second guest, were it charged less
	st := pl.Snapshot()
	used, _ := s.budget.Used()
	mu.Lock()
	n := booted
	mu.Unlock()
	if st.Ready+st.Preparing != 1 || n != 1 || used != charge {
		t.Errorf("a pool within one guest's budget: %d ready, %d preparing, %d booted, %d bytes charged (want 1, charged %d)", st.Ready, st.Preparing, n, used, charge)
	}
	cancel()
	<-pl.Drained()
	if used, _ := s.budget.Used(); used != 0 {
		t.Errorf("after the pool drained the budget holds %d bytes", used)
	}
}

// TestAttackVMGuestFloodsAuditLine: a guest answers an exec with a
// verdict of a megabyte (terminal escapes in it), a made-up state and a
// thousand blocked calls of long names: all within the answer's bound.
// The host's audit line for the exec holds none of it: the verdict is
// "error" saying what the guest claimed (cut), the state empty, the
// blocked calls bounded, the line short.
func TestAttackVMGuestFloodsAuditLine(t *testing.T) {
	var blocked []api.BlockedSyscall
	for i := range 1000 {
		blocked = append(blocked, api.BlockedSyscall{Name: strings.Repeat("n", 1000), Count: i, Example: strings.Repeat("e", 1000)})
	}
	huge, _ := json.Marshal(map[string]any{"verdict": "\x1b[2J" + strings.Repeat("v", 1<<20), "state": strings.Repeat("s", 1<<20), "blocked_syscalls": blocked})
	s := vmTestServer(t, func() *fakeGuest {
		lie := liar("g")
		return newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			if strings.HasSuffix(path, "/exec") {
				return 200, bytes.NewReader(huge)
			}
			return lie(method, path, body)
		})
	})
	var audit bytes.Buffer
	s.cfg.Audit = NewAuditWriter(&audit)
	code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, _ := as(s, 1000, "POST", "/v1/sessions/"+c.SessionID+"/exec", api.ExecRequest{Code: ptr("1")}); code != 200 {
		t.Fatalf("exec: %d", code)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(audit.String()), "\n") {
		var e AuditEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line of %d bytes: %v", len(line), err)
		}
		if e.Event != "exec_end" {
			continue
		}
		found = true
		if len(line) > 64<<10 || e.Verdict != api.ExecFailed || e.State != "" || len(e.Blocked) > maxAuditBlocked || e.Error == nil || strings.ContainsRune(*e.Error, '\x1b') {
			t.Errorf("exec_end: %d bytes, verdict %.40q, state %.20q, %d blocked calls", len(line), e.Verdict, e.State, len(e.Blocked))
		}
	}
	if !found {
		t.Errorf("no exec_end line in %.400s", audit.String())
	}
}

// TestAttackVMSessionHidesNetwork: a vm session's guest whose exec
// results leave out the connections its host's proxy made for it, or
// claim them refused, does not hide them: each exec's network list has
// the host's decisions of that exec (what the host's list gained around
// it, as a jail session's exec has), over the guest's word for the same
// host, port and way, and its stderr the notices of the host's
// refusals. What the guest alone reports (a refusal of its own proxy)
// stays, as in a single run.
func TestAttackVMSessionHidesNetwork(t *testing.T) {
	var mu sync.Mutex
	var hostLog []jail.NetworkDecision
	setHost := func(ds ...jail.NetworkDecision) {
		mu.Lock()
		hostLog = ds
		mu.Unlock()
	}
	allowed := jail.NetworkDecision{Host: "allowed.test", Port: 80, Address: "203.0.113.7:80", Via: "CONNECT", Allowed: true, Count: 1, BytesUp: 10, BytesDown: 100}
	loop := jail.NetworkDecision{Host: "loop.test", Port: 80, Address: "127.0.0.1:80", Via: "CONNECT", Reason: "127.0.0.1 is loopback", Count: 1}
	execs := 0
	s := vmTestServer(t, func() *fakeGuest {
		g := newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			switch {
			case method == "POST" && path == "/v1/sessions":
				b, _ := json.Marshal(api.SessionCreated{SessionID: "0123456789abcdef0123456789abcdef", Profile: "vm"})
				return 201, bytes.NewReader(b)
			case strings.HasSuffix(path, "/exec"):
				// What the guest's proxy would have seen, the host's
				// proxy records meanwhile; the guest's answer lies.
				execs++
				a, l := allowed, loop
				if execs == 2 {
					a.Count, a.BytesUp, a.BytesDown = 2, 20, 200
				}
				setHost(a, l)
				own := jail.NetworkDecision{Host: "other.test", Port: 80, Via: "CONNECT", Reason: "not in the allowlist", Count: 1}
				hidden := jail.NetworkDecision{Host: "allowed.test", Port: 80, Via: "CONNECT", Reason: "never tried", Count: 1}
				b, _ := json.Marshal(map[string]any{"verdict": "ok", "stdout": "", "stderr": "guest's own\n", "network": []jail.NetworkDecision{hidden, own}})
				return 200, bytes.NewReader(b)
			default:
				b, _ := json.Marshal(api.SessionInfo{SessionID: "0123456789abcdef0123456789abcdef", Alive: true})
				return 200, bytes.NewReader(b)
			}
		})
		g.network = func() []jail.NetworkDecision {
			mu.Lock()
			defer mu.Unlock()
			return append([]jail.NetworkDecision(nil), hostLog...)
		}
		return g
	})
	id := fakeVMSession(t, s)
	exec := func() api.ExecResult { t.Helper(); return fakeVMExec(t, s, id, "fetch()") }
	show := func(ds []jail.NetworkDecision) string {
		var out []string
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%s:%d %s allowed=%v count=%d down=%d", d.Host, d.Port, d.Via, d.Allowed, d.Count, d.BytesDown))
		}
		return strings.Join(out, "; ")
	}
	r := exec()
	want := "allowed.test:80 CONNECT allowed=true count=1 down=100; loop.test:80 CONNECT allowed=false count=1 down=0; other.test:80 CONNECT allowed=false count=1 down=0"
	if got := show(r.Network); got != want {
		t.Errorf("first exec's network:\n got %s\nwant %s", got, want)
	}
	if !strings.HasPrefix(r.Stderr, "guest's own\n") || !strings.Contains(r.Stderr, "stockade: network: refused CONNECT loop.test:80: 127.0.0.1 is loopback") {
		t.Errorf("first exec's stderr %q: want the guest's and the host's refusal's notice", r.Stderr)
	}
	// The second exec has what the host's list gained during it alone.
	r = exec()
	want = "allowed.test:80 CONNECT allowed=true count=1 down=100; other.test:80 CONNECT allowed=false count=1 down=0"
	if got := show(r.Network); got != want {
		t.Errorf("second exec's network:\n got %s\nwant %s", got, want)
	}
	if strings.Contains(r.Stderr, "loop.test") {
		t.Errorf("second exec's stderr %q has the first exec's refusal", r.Stderr)
	}
}

// endlessLines is a guest's streamed answer that never gets to its
// result: stdout lines of 1 KiB, up to limit bytes, counting what the
// host read.
type endlessLines struct {
	mu          sync.Mutex
	read, limit int64
}

func (e *endlessLines) Read(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.read >= e.limit {
		return 0, io.EOF
	}
	line := `{"type":"stdout","data":"` + strings.Repeat("x", 1000) + "\"}\n"
	n := 0
	for n+len(line) <= len(p) && e.read+int64(n) < e.limit {
		n += copy(p[n:], line)
	}
	if n == 0 {
		n = copy(p, line)
	}
	e.read += int64(n)
	return n, nil
}

func (e *endlessLines) total() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.read
}

// TestAttackVMGuestStreamsPastBound: a guest that answers a streamed
// exec with output lines that never end is read no further than the
// answer's bound (its lines reaching the caller as they come): the
// session ends, and its guest with it, instead of the host relaying the
// guest's stream for as long as the guest likes.
func TestAttackVMGuestStreamsPastBound(t *testing.T) {
	var g *fakeGuest
	var lines *endlessLines
	s := vmTestServer(t, func() *fakeGuest {
		g = newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			switch {
			case method == "POST" && path == "/v1/sessions":
				b, _ := json.Marshal(api.SessionCreated{SessionID: "0123456789abcdef0123456789abcdef", Profile: "vm"})
				return 201, bytes.NewReader(b)
			case strings.HasSuffix(path, "/exec"):
				g.ctype = api.NDJSON
				return 200, lines
			default:
				b, _ := json.Marshal(api.SessionInfo{SessionID: "0123456789abcdef0123456789abcdef", Alive: true})
				return 200, bytes.NewReader(b)
			}
		})
		return g
	})
	s.cfg.FilesMax = 64 << 10
	code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	max := s.vmAnswerMax(s.sessionSpecs["vm"])
	lines = &endlessLines{limit: 4 * max}
	b, _ := json.Marshal(api.ExecRequest{Code: ptr("1")})
	// A real connection: a stream's lines are flushed with a deadline.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handler().ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, peer{uid: 1000, pid: 1})))
	}))
	defer hs.Close()
	req, _ := http.NewRequest("POST", hs.URL+"/v1/sessions/"+c.SessionID+"/exec", bytes.NewReader(b))
	req.Header.Set("Accept", api.NDJSON)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if read := lines.total(); read > max+64<<10 {
		t.Errorf("the host read %d bytes of the guest's stream, past the bound %d", read, max)
	}
	if !strings.HasPrefix(string(got), `{"type":"stdout","data":"xxx`) || strings.Contains(string(got), `"result"`) {
		t.Errorf("the caller got %.200q..., want the guest's lines as they came and no result", got)
	}
	if !g.wasClosed() {
		t.Errorf("the guest was kept after its stream past the bound")
	}
	if code, _ := as(s, 1000, "POST", "/v1/sessions/"+c.SessionID+"/exec", api.ExecRequest{Code: ptr("1")}); code != 410 {
		t.Errorf("exec after the stream past the bound: %d, want 410", code)
	}
}

// TestAttackVMSessionExecsShareNetwork: two execs of one vm session sent
// together. The guest's server runs them one after the other (a
// session's slot), so the second waits in the guest while the first
// reaches a host. Each exec's network list is what the host's proxy's
// list gained around it: were the host's "before" of the second taken
// while the first still ran, the first's connection would show in the
// second's result too (and its refusals' notices in its stderr). The
// host runs a session's execs one at a time itself: the second's list
// has nothing of the first's.
func TestAttackVMSessionExecsShareNetwork(t *testing.T) {
	var mu sync.Mutex
	var hostLog []jail.NetworkDecision
	reached := jail.NetworkDecision{Host: "first.test", Port: 443, Address: "203.0.113.7:443", Via: "CONNECT", Allowed: true, Count: 1}
	aAtGuest := make(chan struct{})  // the first exec reached the guest
	bAtGuest := make(chan struct{})  // the second exec reached the guest
	aAnswered := make(chan struct{}) // the first exec's answer reached the caller
	s := vmTestServer(t, func() *fakeGuest {
		g := newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			switch {
			case method == "POST" && path == "/v1/sessions":
				b, _ := json.Marshal(api.SessionCreated{SessionID: "0123456789abcdef0123456789abcdef", Profile: "vm"})
				return 201, bytes.NewReader(b)
			case strings.HasSuffix(path, "/exec") && bytes.Contains(body, []byte(`"first"`)):
				// The first exec runs until the second is in the guest
				// (its host's "before" taken), or a while: a host that
				// holds the second back never sends it meanwhile.
				close(aAtGuest)
				select {
				case <-bAtGuest:
				case <-time.After(2 * time.Second):
				}
				mu.Lock()
				hostLog = append(hostLog, reached)
				mu.Unlock()
			case strings.HasSuffix(path, "/exec"):
				close(bAtGuest)
				<-aAnswered // the guest's slot: the first exec's turn is over
			default:
				b, _ := json.Marshal(api.SessionInfo{SessionID: "0123456789abcdef0123456789abcdef", Alive: true})
				return 200, bytes.NewReader(b)
			}
			b, _ := json.Marshal(map[string]any{"verdict": "ok", "stdout": "", "stderr": "", "network": []jail.NetworkDecision{}})
			return 200, bytes.NewReader(b)
		})
		g.network = func() []jail.NetworkDecision {
			mu.Lock()
			defer mu.Unlock()
			return append([]jail.NetworkDecision(nil), hostLog...)
		}
		return g
	})
	code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	exec := func(name string) api.ExecResult {
		code, body := as(s, 1000, "POST", "/v1/sessions/"+c.SessionID+"/exec", api.ExecRequest{Code: ptr(name)})
		var r api.ExecResult
		if code != 200 || json.Unmarshal(body, &r) != nil {
			t.Errorf("exec %s: %d %s", name, code, body)
		}
		return r
	}
	var a, b api.ExecResult
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		a = exec("first")
		close(aAnswered)
	}()
	go func() {
		defer wg.Done()
		<-aAtGuest // the second is sent once the first is in the guest
		b = exec("second")
	}()
	wg.Wait()
	if len(a.Network) != 1 || a.Network[0].Host != "first.test" {
		t.Errorf("the first exec's network: %+v; want first.test's connection", a.Network)
	}
	for _, d := range b.Network {
		if d.Host == "first.test" {
			t.Errorf("the second exec's network has the first's connection: %+v", b.Network)
		}
	}
}

// TestAttackVMGuestMisstatesNetwork: a vm session's guest lies about its
// exec's network in the two ways the host's merge must not believe. It
// claims a connection allowed that the host's proxy never made (a
// guest's every allowed connection goes through the host's proxy: the
// claim is the guest's word alone), and, in the next exec, it leaves its
// network list and stderr out of the result altogether, while the host's
// proxy allowed one connection and refused another for it. The first
// result has no invented connection; the second has the host's two
// entries and the refusal's notice all the same.
func TestAttackVMGuestMisstatesNetwork(t *testing.T) {
	var mu sync.Mutex
	var hostLog []jail.NetworkDecision
	allowed := jail.NetworkDecision{Host: "allowed.test", Port: 80, Address: "203.0.113.7:80", Via: "CONNECT", Allowed: true, Count: 1}
	loop := jail.NetworkDecision{Host: "loop.test", Port: 80, Address: "127.0.0.1:80", Via: "CONNECT", Reason: "127.0.0.1 is loopback", Count: 1}
	invented := jail.NetworkDecision{Host: "invented.test", Port: 443, Address: "198.51.100.9:443", Via: "CONNECT", Allowed: true, Count: 7, BytesDown: 1 << 20}
	execs := 0
	s := vmTestServer(t, func() *fakeGuest {
		g := newFakeGuest(func(method, path string, body []byte) (int, io.Reader) {
			switch {
			case method == "POST" && path == "/v1/sessions":
				b, _ := json.Marshal(api.SessionCreated{SessionID: "0123456789abcdef0123456789abcdef", Profile: "vm"})
				return 201, bytes.NewReader(b)
			case strings.HasSuffix(path, "/exec"):
				execs++
				if execs == 1 {
					b, _ := json.Marshal(map[string]any{"verdict": "ok", "stdout": "", "stderr": "", "network": []jail.NetworkDecision{invented}})
					return 200, bytes.NewReader(b)
				}
				mu.Lock()
				hostLog = []jail.NetworkDecision{allowed, loop}
				mu.Unlock()
				b, _ := json.Marshal(map[string]any{"verdict": "ok", "stdout": "quiet"})
				return 200, bytes.NewReader(b)
			default:
				b, _ := json.Marshal(api.SessionInfo{SessionID: "0123456789abcdef0123456789abcdef", Alive: true})
				return 200, bytes.NewReader(b)
			}
		})
		g.network = func() []jail.NetworkDecision {
			mu.Lock()
			defer mu.Unlock()
			return append([]jail.NetworkDecision(nil), hostLog...)
		}
		return g
	})
	id := fakeVMSession(t, s)
	exec := func() api.ExecResult { t.Helper(); return fakeVMExec(t, s, id, "fetch()") }
	hosts := func(ds []jail.NetworkDecision) string {
		var out []string
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%s allowed=%v", d.Host, d.Allowed))
		}
		return strings.Join(out, "; ")
	}
	if r := exec(); len(r.Network) != 0 {
		t.Errorf("the first exec's network is %q: the guest's invented connection, which no host's proxy made", hosts(r.Network))
	}
	r := exec()
	if got, want := hosts(r.Network), "allowed.test allowed=true; loop.test allowed=false"; got != want {
		t.Errorf("the second exec's network (its guest left the list out): %q, want the host's %q", got, want)
	}
	if !strings.Contains(r.Stderr, "stockade: network: refused CONNECT loop.test:80: 127.0.0.1 is loopback") {
		t.Errorf("the second exec's stderr %q has no notice of the host's refusal", r.Stderr)
	}
	if r.Stdout != "quiet" {
		t.Errorf("the second exec's stdout %q, want the guest's", r.Stdout)
	}
}

// fakeVMSession makes a session of the vm profile as uid 1000 on a server
// whose guests are fakes, and returns its id.
func fakeVMSession(t *testing.T, s *Server) string {
	t.Helper()
	code, body := as(s, 1000, "POST", "/v1/sessions", api.SessionRequest{Profile: "vm"})
	var c api.SessionCreated
	if code != 201 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	return c.SessionID
}

// fakeVMExec runs code in session id as uid 1000 and returns its result.
func fakeVMExec(t *testing.T, s *Server, id, code string) api.ExecResult {
	t.Helper()
	status, body := as(s, 1000, "POST", "/v1/sessions/"+id+"/exec", api.ExecRequest{Code: ptr(code)})
	var r api.ExecResult
	if status != 200 || json.Unmarshal(body, &r) != nil {
		t.Fatalf("exec: %d %s", status, body)
	}
	return r
}
