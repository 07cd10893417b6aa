package vmtier

import (
	"encoding/binary"
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
	go func() {
		// A stream whose data is a ping frame's bytes, then pings.
		payload := frame(2, 1, 0, 7)
		guest.Write(append(frame(0, 1, 1, uint32(len(payload))), payload...))
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
	select {
	case <-sess.CloseChan():
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived the guest's pings")
	}
}
