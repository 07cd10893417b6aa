package vmtier

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/jail"
	"golang.org/x/sys/unix"
)

// The guest's side of a session: its init starts `stockade serve` on a
// unix socket of the guest's (the server's own session machinery, whose
// jail, in this kernel, holds the session) and relays each call from the
// channel to it, each answer back. The guest's server never sees the
// host's callers: the host's server owns the session and decides when it
// ends, by ending the guest.
const (
	guestSocket  = "/run/stockade/guest.sock"
	guestProfile = guestDir + "/session.toml"
	// guestServeLog bounds what the guest's server may write to the
	// console over a session's life, well below the console's flood bound.
	guestServeLog = 64 << 10
)

// guestServe runs the session's server and relays calls until the
// channel or the server ends, then powers the guest off.
func guestServe(c *os.File, plan *Plan) {
	ready := serveReady{}
	// With an allowlist the guest's server gets the network channel's
	// forwarder as its upstream, a deciding one (the host's proxy): its
	// jail's proxy relays what the rules allow, unresolved, as a single
	// run's does. The channel lives as long as the guest.
	spec := plan.Spec
	_, raw, err := guestNet(&spec, plan.Fault)
	if err == nil {
		ready.Raw = raw
		var exited <-chan struct{}
		if exited, err = startGuestServer(plan.Serve, spec.Host); err == nil {
			go func() {
				// The server ending ends the session: the host sees the guest go.
				<-exited
				fmt.Fprintln(os.Stderr, "stockade-vm: the session's server exited")
				guestOff(c)
			}()
		}
	}
	if err != nil {
		ready.Error = err.Error()
	}
	w := &frameWriter{w: c}
	if err := w.send(ready); err != nil || ready.Error != "" {
		fmt.Fprintln(os.Stderr, "stockade-vm: serve:", ready.Error, err)
		guestOff(c)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", guestSocket)
	}}}
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		b, err := readFrame(r, maxCall+maxCall/2+4<<10, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stockade-vm: channel:", err)
			guestOff(c)
		}
		var cl call
		if err := json.Unmarshal(b, &cl); err != nil {
			fmt.Fprintln(os.Stderr, "stockade-vm: call:", err)
			guestOff(c)
		}
		go func() { _ = w.send(relay(hc, &cl, func(a answer) error { return w.send(a) })) }()
	}
}

// startGuestServer writes the profile and starts the guest's `stockade
// serve`, returning once its socket answers; the channel is closed when
// that server exits. host's upstream, when set, is the network channel's
// forwarder: the server's HTTPS_PROXY, a deciding one.
func startGuestServer(p *ServePlan, host jail.Host) (<-chan struct{}, error) {
	if err := os.MkdirAll(guestDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(guestProfile, p.Profile, 0o644); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--socket", guestSocket, "--profile", guestProfile, "--pool", "1",
		"--audit-log", "", "--sessions", "1", "--cgroup-parent", guestCgroup}, p.Args...)
	if host.UpstreamDecides {
		args = append(args, "--upstream-decides")
	}
	cmd := exec.Command(self, args...)
	if host.UpstreamProxy != "" {
		cmd.Env = append(os.Environ(), "HTTPS_PROXY="+host.UpstreamProxy)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	go func() {
		io.Copy(os.Stderr, io.LimitReader(pr, guestServeLog))
		io.Copy(io.Discard, pr)
		pr.Close()
	}()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			return nil, fmt.Errorf("the guest's stockade serve exited before it listened")
		default:
		}
		if conn, err := net.Dial("unix", guestSocket); err == nil {
			conn.Close()
			return exited, nil
		}
	}
	_ = cmd.Process.Kill()
	return nil, fmt.Errorf("the guest's stockade serve did not listen on %s", guestSocket)
}

// relay makes one call to the guest's server. A streamed answer
// (application/x-ndjson) goes out a frame per line as its server writes
// them (more sends each, with More), up to the same bound as a whole
// answer; the answer returned is its last frame.
func relay(hc *http.Client, c *call, more func(answer) error) answer {
	fail := func(err error) answer {
		b, _ := json.Marshal(map[string]string{"error": "isolation vm: the guest's server: " + err.Error()})
		return answer{ID: c.ID, Status: 502, Header: http.Header{"Content-Type": {"application/json"}}, Body: b}
	}
	req, err := http.NewRequest(c.Method, "http://guest"+c.Target, bytes.NewReader(c.Body))
	if err != nil {
		return fail(err)
	}
	for _, h := range callHeaders {
		for _, v := range c.Header.Values(h) {
			req.Header.Add(h, v)
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	head := http.Header{"Content-Type": {resp.Header.Get("Content-Type")}}
	body := io.LimitReader(resp.Body, maxAnswer/2)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), api.NDJSON) {
		br := bufio.NewReaderSize(body, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				if more(answer{ID: c.ID, Status: resp.StatusCode, Header: head, Body: line, More: true}) != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		return answer{ID: c.ID, Status: resp.StatusCode, Header: head}
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return fail(err)
	}
	return answer{ID: c.ID, Status: resp.StatusCode, Header: head, Body: b}
}

// frameWriter writes one frame at a time.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) send(v any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return writeFrame(f.w, v, json.Marshal)
}

// guestOff powers the guest off: the host sees its VMM exit.
func guestOff(c *os.File) {
	_ = unix.IoctlSetInt(int(c.Fd()), unix.TCSBRK, 1)
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		time.Sleep(time.Hour)
	}
}
