package proctest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Listen serves each connection to a listener on 127.0.0.1 with serve
// (each with a minute's deadline) until the test ends, and returns its
// address.
func Listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(time.Minute))
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}
