package vmtier

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/jail"
)

// TestAttackGuestAnswerPastFrameBound: a session's guest answers a call
// with a frame past the bound its server set (Options.MaxAnswer: what the
// server would read of an answer). The host reads no such frame: the
// guest is done with the bound as the reason, and the call fails,
// instead of the host holding the frame, decoding it and handing it on
// (up to 96 MiB, and 72 of it again decoded, for every guest).
func TestAttackGuestAnswerPastFrameBound(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	const bound = 1 << 20
	g := newGuest(jail.Spec{}, time.Minute, Options{MaxAnswer: AnswerFrame(bound)})
	g.conn, g.r = host, bufio.NewReaderSize(host, 64<<10)
	go g.read()
	// The guest: reads the call, answers it with twice the bound.
	go func() {
		r := bufio.NewReader(guest)
		b, err := readFrame(r, maxCall+maxCall/2+4<<10, 0)
		if err != nil {
			return
		}
		var c call
		if json.Unmarshal(b, &c) != nil {
			return
		}
		_ = writeFrame(guest, &answer{ID: c.ID, Status: 200, Body: bytes.Repeat([]byte("x"), 2*bound)}, json.Marshal)
	}()
	req, _ := http.NewRequest("GET", "http://guest/v1/sessions/ab", nil)
	resp, err := g.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("an answer of %d bytes past a bound of %d was handed on (%d bytes)", 2*bound, bound, resp.ContentLength)
	}
	select {
	case <-g.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the guest is not done after an answer past the bound")
	}
	if e := g.Err(); e == nil || !strings.Contains(e.Error(), "past the bound") {
		t.Errorf("the guest ended with %v, want its answer past the bound", e)
	}
}

// TestAttackGuestStreamsEmptyFrames: a session's guest answers a call
// with a stream of frames that never ends, each without a byte of body
// (each passes any byte bound the host's reader of the body keeps). The
// host counts each frame's head against the answer's bound: the guest
// is done past it, and the body's reader gets an error instead of
// waiting for ever while the host decodes frames.
func TestAttackGuestStreamsEmptyFrames(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	const bound = 1 << 20
	g := newGuest(jail.Spec{}, time.Minute, Options{MaxAnswer: AnswerFrame(bound)})
	// The channel's end after the test (the pipe closed) is a VMM's
	// death to read: it names it with the console's tail.
	g.con = newConsole()
	g.conn, g.r = host, bufio.NewReaderSize(host, 64<<10)
	read := make(chan struct{})
	go func() { g.read(); close(read) }()
	defer func() {
		host.Close()
		<-read
	}()
	go func() {
		r := bufio.NewReader(guest)
		b, err := readFrame(r, maxCall+maxCall/2+4<<10, 0)
		if err != nil {
			return
		}
		var c call
		if json.Unmarshal(b, &c) != nil {
			return
		}
		for {
			if writeFrame(guest, &answer{ID: c.ID, Status: 200, Header: http.Header{"Content-Type": {"application/x-ndjson"}}, More: true}, json.Marshal) != nil {
				return
			}
		}
	}()
	req, _ := http.NewRequest("POST", "http://guest/v1/sessions/ab/exec", nil)
	resp, err := g.RoundTrip(req)
	if err != nil {
		t.Fatalf("the stream's first frame: %v", err)
	}
	defer resp.Body.Close()
	body := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		body <- err
	}()
	select {
	case err := <-body:
		if err == nil {
			t.Errorf("the endless stream's body ended without an error")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the endless stream of empty frames was read for a minute")
	}
	select {
	case <-g.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the guest is not done after a stream past the bound")
	}
	if e := g.Err(); e == nil || !strings.Contains(e.Error(), "past the bound") {
		t.Errorf("the guest ended with %v, want its stream past the bound", e)
	}
}
