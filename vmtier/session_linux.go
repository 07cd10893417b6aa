package vmtier

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/stockade/stockade/jail"
)

// A session's guest: booted ahead (a warm pool keeps some waiting at the
// hello), then given a ServePlan, after which its init runs `stockade
// serve` inside the guest, whose own jail holds the session, and relays
// HTTP calls from the channel to it. The host's server forwards its
// caller's session requests as calls; every answer is bounded here, and
// the host's server decides who may call and when the guest ends.

// serveReady is the guest's answer to a ServePlan.
type serveReady struct {
	Error string `json:"error,omitempty"`
	// Raw is the "netraw" fault's answers (tests only; the host reads
	// them only when it asked for the fault).
	Raw []string `json:"raw,omitempty"`
}

// call is one HTTP request to the guest's server; answer its response.
type call struct {
	ID     uint64      `json:"id"`
	Method string      `json:"method"`
	Target string      `json:"target"` // path and query
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

type answer struct {
	ID     uint64      `json:"id"`
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// More says the answer goes on in further frames of the same id: a
	// streamed answer (Accept: application/x-ndjson), a frame per line
	// as the guest's server wrote it, the last one without More.
	More bool `json:"more,omitempty"`
}

// waiter is a call waiting for its answer's frames.
type waiter struct {
	ch   chan *answer
	gone chan struct{} // closed when the call takes no more frames
	once sync.Once
}

func (w *waiter) leave() { w.once.Do(func() { close(w.gone) }) }

// callHeaders are the request headers a call carries: what says how the
// body is written and how the answer should be.
var callHeaders = []string{"Content-Type", "Accept"}

// Bounds of a session's channel: one call's body (the host's server has
// bounded it already), one answer's frame (JSON encodes the body as
// base64: a third more).
const (
	maxCall       = 64 << 20
	maxAnswer     = 96 << 20
	maxHelloFrame = 4 << 10
)

// Guest is a booted guest: waiting for its ServePlan, then serving a
// session until Close. It holds on the host its VMM (pid 1 of its own
// namespaces), the VMM's cgroup (recorded in a run lock slot) and a run
// directory with the channel's socket; Close removes all three.
type Guest struct {
	spec     jail.Spec
	answer   time.Duration // how long the guest's server may take to start
	frameMax int64         // bytes of one answer's frame
	vmm
	conn  net.Conn
	net   *hostNet // the network channel's host side; nil without an allowlist
	fault string   // tests: Plan.Fault
	raw   []string // tests: the "netraw" fault's answers, from the guest's serveReady
	r     *bufio.Reader

	wmu      sync.Mutex // one frame at a time on the channel
	mu       sync.Mutex
	nextID   uint64
	waiting  map[uint64]*waiter
	cause    error         // why the guest is done
	done     chan struct{} // closed once the guest can answer no more
	closed   sync.Once
	closeErr error
}

// HostMemory is what a guest for spec may hold on the host, for a
// server's memory budget: its VMM's cgroup limit (the guest's RAM: the
// jail's memory, twice the root image, the guest's kernel and init; and
// QEMU itself). It resolves the tier as Boot does, building the image
// once; where that fails no guest boots, and the image is left out.
func HostMemory(spec jail.Spec, o Options) int64 {
	t, err := resolve(spec, o)
	if err != nil {
		t = &tier{}
	}
	return t.ramMiB(spec)<<20 + vmmOverhead
}

// AnswerFrame is the bound of a frame carrying an answer whose body is at
// most body bytes (Options.MaxAnswer): base64's third more and a head.
func AnswerFrame(body int64) int64 { return body/3*4 + 64<<10 }

// Boot starts a guest for spec (Isolation "vm") and returns once it said
// hello: a warm guest, waiting for its ServePlan. spec's limits size the
// guest and the VMM's cgroup, as a single run's do.
func Boot(ctx context.Context, spec jail.Spec, o Options) (*Guest, error) {
	if err := spec.Validate(); err != nil {
		return nil, setupErr("spec: %w", err)
	}
	emulate := spec.VMEmulate || os.Getenv(EmulateEnv) == "1"
	kvmErr := KVM()
	if kvmErr != nil && !emulate {
		return nil, setupErr(`isolation "vm": no KVM (%v): load kvm_intel or kvm_amd and let stockade open /dev/kvm (docs/isolation.md#enabling-kvm); or, for testing only, allow software emulation with vm_emulate = true or %s=1`, kvmErr, EmulateEnv)
	}
	t, err := resolve(spec, o)
	if err != nil {
		return nil, err
	}
	t.kvm = kvmErr == nil
	boot, allow := t.allowances(o)
	g := newGuest(spec, allow, o)
	if err := g.start(t, g.spec, o); err != nil {
		g.Close()
		return nil, err
	}
	// The network channel's host side lives as long as the guest: the
	// session's every exec goes through the one proxy, its caps and byte
	// limits the session's (as a jail session's proxy's are).
	if g.net, err = startHostNet(g.dir, g.spec, g.exited); err != nil {
		g.Close()
		return nil, err
	}
	if err := g.hello(ctx, boot); err != nil {
		g.Close()
		return nil, err
	}
	go func() {
		select {
		case <-g.exited:
			g.fail(g.died(errors.New("the VMM exited")))
		case <-g.con.flood:
			g.fail(&vmError{VerdictConsole, fmt.Sprintf("isolation vm: the guest wrote more than %d bytes to its console; the VMM was killed", consoleLimit)})
			g.kill()
		}
	}()
	return g, nil
}

// newGuest is a guest for spec, not yet started, whose server has allow
// to start.
func newGuest(spec jail.Spec, allow time.Duration, o Options) *Guest {
	g := &Guest{spec: spec, answer: allow, frameMax: maxAnswer, vmm: newVMM(), waiting: map[uint64]*waiter{}, done: make(chan struct{}), fault: o.fault}
	if o.MaxAnswer > 0 && o.MaxAnswer < maxAnswer {
		g.frameMax = o.MaxAnswer
	}
	return g
}

// hello connects to the channel and waits for the guest's hello.
func (g *Guest) hello(ctx context.Context, boot time.Duration) error {
	deadline := time.Now().Add(boot)
	sock := filepath.Join(g.dir, "ctl")
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			g.conn = c
			break
		}
		select {
		case <-g.exited:
			return g.died(fmt.Errorf("connect: %w", err))
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return &vmError{VerdictNoAnswer, fmt.Sprintf("isolation vm: the guest did not come up within %v%s", boot, g.con.quote())}
		}
	}
	g.r = bufio.NewReaderSize(g.conn, 64<<10)
	got := make(chan error, 1)
	go func() {
		g.conn.SetReadDeadline(deadline)
		_, err := readFrame(g.r, maxHelloFrame, 64<<10)
		g.conn.SetReadDeadline(time.Time{})
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			select {
			case <-g.exited:
				return g.died(fmt.Errorf("hello: %w", err))
			case <-time.After(time.Second):
			}
			return &vmError{VerdictNoAnswer, fmt.Sprintf("isolation vm: the guest did not come up within %v (%v)%s", boot, err, g.con.quote())}
		}
		return nil
	case <-ctx.Done():
		g.conn.Close()
		return context.Cause(ctx)
	}
}

// died names how the VMM ended, once it has (else the channel's failure).
func (g *Guest) died(cause error) error {
	select {
	case <-g.exited:
	case <-time.After(2 * time.Second):
	}
	return (&tier{}).failure(g.con, g.exited, g.waitErr, cause)
}

// Serve sends the guest its ServePlan and waits until its server
// answers: the guest then takes calls (RoundTrip) until Close.
func (g *Guest) Serve(p ServePlan) error {
	plan := Plan{Spec: g.spec, Serve: &p, Fault: g.fault}
	plan.Spec.Host = jail.Host{}
	if err := g.write(&plan); err != nil {
		return fmt.Errorf("isolation vm: send the serve plan: %w", err)
	}
	g.conn.SetReadDeadline(time.Now().Add(g.answer))
	b, err := readFrame(g.r, maxHelloFrame, 0)
	g.conn.SetReadDeadline(time.Time{})
	if err != nil {
		return g.died(fmt.Errorf("the guest's server did not start: %w", err))
	}
	var ready serveReady
	if err := json.Unmarshal(b, &ready); err != nil {
		return fmt.Errorf("isolation vm: the guest's server: %w", err)
	}
	if ready.Error != "" {
		return fmt.Errorf("isolation vm: the guest's server did not start: %.400s", ready.Error)
	}
	if g.fault != "" {
		g.raw = ready.Raw
	}
	go g.read()
	return nil
}

func (g *Guest) write(v any) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return writeFrame(g.conn, v, json.Marshal)
}

// read hands each answer to the call waiting for it. An answer no call
// waits for (a guest speaking unasked, or to a call that gave up) is
// dropped; a frame past the bound or that does not decode ends the guest.
func (g *Guest) read() {
	for {
		b, err := readFrame(g.r, g.frameMax, 0)
		if err != nil {
			if errors.Is(err, errFrameTooBig) {
				g.fail(fmt.Errorf("isolation vm: the guest answered past the bound: %w", err))
				g.kill()
				return
			}
			g.fail(g.died(fmt.Errorf("the channel: %w", err)))
			return
		}
		var a answer
		if err := json.Unmarshal(b, &a); err != nil {
			g.fail(fmt.Errorf("isolation vm: the guest's answer does not decode: %w", err))
			g.kill()
			return
		}
		g.mu.Lock()
		w := g.waiting[a.ID]
		if !a.More {
			delete(g.waiting, a.ID)
		}
		g.mu.Unlock()
		if w != nil {
			// A streamed answer's reader may be slow (its caller's):
			// the channel waits for it, or for it to leave.
			select {
			case w.ch <- &a:
			case <-w.gone:
			}
		}
	}
}

// fail marks the guest done with why, once.
func (g *Guest) fail(why error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cause != nil {
		return
	}
	g.cause = why
	close(g.done)
}

// RoundTrip sends req to the guest's server and returns its answer, read
// whole within the bound.
func (g *Guest) RoundTrip(req *http.Request) (*http.Response, error) {
	c := call{Method: req.Method, Target: req.URL.RequestURI(), Header: http.Header{}}
	for _, h := range callHeaders {
		if v := req.Header.Values(h); len(v) > 0 {
			c.Header[h] = v
		}
	}
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxCall+1))
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(b) > maxCall {
			return nil, fmt.Errorf("isolation vm: a request body over %d bytes", maxCall)
		}
		c.Body = b
	}
	w := &waiter{ch: make(chan *answer, 1), gone: make(chan struct{})}
	ch := w.ch
	g.mu.Lock()
	if g.cause != nil {
		g.mu.Unlock()
		return nil, g.Err()
	}
	g.nextID++
	c.ID = g.nextID
	g.waiting[c.ID] = w
	g.mu.Unlock()
	forget := func() {
		g.mu.Lock()
		delete(g.waiting, c.ID)
		g.mu.Unlock()
		w.leave()
	}
	if err := g.write(&c); err != nil {
		forget()
		return nil, fmt.Errorf("isolation vm: send a call: %w", err)
	}
	select {
	case a := <-ch:
		if a.Status < 100 || a.Status > 599 {
			forget()
			return nil, fmt.Errorf("isolation vm: the guest answered status %d", a.Status)
		}
		h := http.Header{}
		if ct := a.Header.Get("Content-Type"); ct != "" {
			h.Set("Content-Type", ct)
		}
		resp := &http.Response{StatusCode: a.Status, Status: strconv.Itoa(a.Status) + " " + http.StatusText(a.Status),
			Header: h, Body: io.NopCloser(bytes.NewReader(a.Body)), ContentLength: int64(len(a.Body)),
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req}
		if !a.More {
			w.leave()
			return resp, nil
		}
		resp.Body, resp.ContentLength = g.stream(req.Context(), a, w, forget), -1
		return resp, nil
	case <-g.done:
		forget()
		return nil, g.Err()
	case <-req.Context().Done():
		forget()
		return nil, context.Cause(req.Context())
	}
}

// stream is a streamed answer's body: first's bytes, then each further
// frame's as it comes, until one without More. Its reader bounds what it
// reads (the server's answer bound); the frames' count is bounded here:
// their bytes with a frame's head each, as one answer's frame is, past
// which the guest is ended. Closing the body, the guest's end or the
// call's context ends the stream, and the channel no longer waits for it.
func (g *Guest) stream(ctx context.Context, first *answer, w *waiter, forget func()) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		defer forget()
		var total int64
		for a := first; ; {
			if total += int64(len(a.Body)) + 64; total > g.frameMax {
				err := fmt.Errorf("isolation vm: the guest streamed past the bound: %w: more than %d bytes", errFrameTooBig, g.frameMax)
				g.fail(err)
				g.kill()
				pw.CloseWithError(err)
				return
			}
			if len(a.Body) > 0 {
				if _, err := pw.Write(a.Body); err != nil {
					return // the reader closed the body
				}
			}
			if !a.More {
				pw.Close()
				return
			}
			select {
			case a = <-w.ch:
			case <-g.done:
				pw.CloseWithError(g.Err())
				return
			case <-ctx.Done():
				pw.CloseWithError(context.Cause(ctx))
				return
			}
		}
	}()
	return pr
}

// Done is closed when the guest can answer no more: its VMM exited, its
// channel failed, or it broke a bound.
func (g *Guest) Done() <-chan struct{} { return g.done }

// Err says why the guest is done (nil while it is not).
func (g *Guest) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cause
}

// Network is what the host's proxy decided for the guest so far, in the
// order each entry first happened, each counting its repeats: nil
// without an allowlist. A session takes an exec's share as the jail's
// session does (what the list gained around it) and merges the guest's
// entries with MergeNetwork.
func (g *Guest) Network() []jail.NetworkDecision {
	if g.net == nil {
		return nil
	}
	return g.net.log.Decisions()
}

// Pid is the VMM's pid on the host; Cgroup its cgroup's name; RunDir the
// run directory with the channel's socket.
func (g *Guest) Pid() int       { return g.cmd.Process.Pid }
func (g *Guest) Cgroup() string { return g.cgroupID }
func (g *Guest) RunDir() string { return g.dir }

// Close kills the VMM and removes its cgroup and run directory; an error
// names what could not be removed (its run lock slot keeps the record
// for the next sweep).
func (g *Guest) Close() error {
	g.closed.Do(func() {
		g.fail(errors.New("isolation vm: the guest was closed"))
		if g.cmd != nil {
			g.kill()
			<-g.exited
		}
		if g.conn != nil {
			g.conn.Close()
		}
		// The VMM is gone: the channel's every stream and tunnel end
		// with the host's proxy, which accepts nothing more.
		g.net.close()
		g.closeErr = g.vmm.close()
	})
	return g.closeErr
}
