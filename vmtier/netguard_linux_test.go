package vmtier

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// TestAttackVMGuestPingFlood: a guest that sends yamux pings on the
// network channel (each would cost the host a goroutine waiting to answer
// it) ends the session at the first, after data frames that carry ping-like
// bytes in their payload pass untouched.
func TestAttackVMGuestPingFlood(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	sess, err := yamux.Server(&muxGuard{Conn: host}, muxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	frame := func(typ uint8, flags uint16, id, length uint32) []byte {
		h := make([]byte, 12)
		h[1] = typ
		binary.BigEndian.PutUint16(h[2:], flags)
		binary.BigEndian.PutUint32(h[4:], id)
		binary.BigEndian.PutUint32(h[8:], length)
		return h
	}
	// The pings wait until the host has taken the stream and its data:
	// a session the first ping ends may otherwise be shut before Accept
	// picks the stream (yamux's Accept takes either, at random).
	read := make(chan struct{})
	// The guest reads what the host writes (the stream's ACK): a pipe
	// nobody reads holds the host's Accept until the session ends.
	go io.Copy(io.Discard, guest)
	go func() {
		// A stream whose data is a ping frame's bytes, then pings.
		payload := frame(2, 1, 0, 7)
		guest.Write(append(frame(0, 1, 1, uint32(len(payload))), payload...))
		select {
		case <-read:
		case <-time.After(20 * time.Second):
		}
		for i := 0; i < 1000; i++ {
			if _, err := guest.Write(frame(2, 1, 0, uint32(i))); err != nil {
				return
			}
		}
	}()
	st, err := sess.Accept()
	if err != nil {
		t.Fatalf("the stream before the pings: %v", err)
	}
	buf := make([]byte, 12)
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := st.Read(buf); err != nil || n != 12 || buf[1] != 2 {
		t.Fatalf("the stream's data: %d %v %x", n, err, buf)
	}
	close(read)
	select {
	case <-sess.CloseChan():
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived the guest's pings")
	}
}

// TestAttackVMGuestStreamTable: a guest that opens streams without end and
// never closes its side (each one the host accepted and closed stays in
// yamux's table until the guest closes it too, or a timeout) cannot grow
// the host's table past netStreams: the channel is not read meanwhile.
func TestAttackVMGuestStreamTable(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	g := &muxGuard{Conn: host}
	sess, err := yamux.Server(g, muxConfig())
	if err != nil {
		t.Fatal(err)
	}
	g.sess.Store(sess)
	defer sess.Close()
	go io.Copy(io.Discard, guest) // the host's FINs and window updates
	// In lockstep: the guest opens the next stream once the host accepted
	// the last (so none is reset for the accept backlog instead), and
	// stops when one is not accepted within 2 s.
	const opens = 4 * netStreams
	acceptedOne := make(chan struct{}, 1)
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for id := uint32(1); n < opens; id += 2 {
			h := make([]byte, 12)
			h[1] = 1 // window update
			binary.BigEndian.PutUint16(h[2:], 1)
			binary.BigEndian.PutUint32(h[4:], id)
			guest.SetWriteDeadline(time.Now().Add(3 * time.Second))
			if _, err := guest.Write(h); err != nil {
				return
			}
			select {
			case <-acceptedOne:
				n++
			case <-time.After(2 * time.Second):
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var accepted, most int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			st, err := sess.AcceptStreamWithContext(ctx)
			if err != nil {
				return
			}
			accepted++
			st.Close() // the host's side, as a refusal closes it
			most = max(most, sess.NumStreams())
			acceptedOne <- struct{}{}
		}
	}()
	n := <-sent
	cancel()
	<-done
	if most > netStreams || accepted != netStreams || n != netStreams {
		t.Fatalf("the guest opened %d streams of %d, the host accepted %d and held at most %d: want %d", n, opens, accepted, most, netStreams)
	}
}
