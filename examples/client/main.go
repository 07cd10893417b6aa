// Command client is stockade's Go client at work: one run, then a session
// whose state lives from one exec to the next, a file written into its
// /work and read back, and its end. It talks to a running `stockade
// serve` (the socket in $STOCKADE_SOCKET, else /run/stockade/stockade.sock)
// or, with STOCKADE_SOCKET=https://HOST:PORT and $STOCKADE_TOKEN, to a
// gateway:
//
//	go run ./examples/client
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/client"
)

func main() {
	server := os.Getenv("STOCKADE_SOCKET")
	if server == "" {
		server = "/run/stockade/stockade.sock"
	}
	c, err := client.New(server, client.Options{Token: os.Getenv("STOCKADE_TOKEN")})
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// One run in a fresh jail, its output streamed as it comes.
	code := "print(sum(range(100)))"
	res, err := c.RunStream(ctx, &api.RunRequest{Code: &code, Limits: api.Limits{"memory": "256M"}},
		client.Output{Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fail(err)
	}
	fmt.Printf("run: verdict %s, exit %d\n", res.Verdict, res.ExitCode)

	// A session: x survives from the first exec to the second.
	s, err := c.CreateSession(ctx, &api.SessionRequest{TTL: "5m"})
	if err != nil {
		fail(err)
	}
	defer c.EndSession(context.Background(), s.SessionID)
	for _, cell := range []string{"x = 6 * 7", "open('answer.txt', 'w').write(str(x))\nx"} {
		r, err := c.Exec(ctx, s.SessionID, &api.ExecRequest{Code: &cell})
		if err != nil {
			fail(err)
		}
		if r.Verdict != api.ExecOK {
			fail(fmt.Errorf("exec: %s: %s", r.Verdict, r.Why))
		}
		if r.Result != nil {
			fmt.Printf("exec: %s\n", *r.Result)
		}
	}
	if _, err := c.WriteFile(ctx, s.SessionID, "in/data.csv", strings.NewReader("a,b\n1,2\n")); err != nil {
		fail(err)
	}
	b, err := c.ReadFile(ctx, s.SessionID, "answer.txt", 1<<10)
	if err != nil {
		fail(err)
	}
	fmt.Printf("answer.txt: %s\n", b)
	end, err := c.EndSession(ctx, s.SessionID)
	if err != nil {
		fail(err)
	}
	fmt.Printf("session: %s after %d execs\n", end.Verdict, end.ExecutionCount)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "client example:", err)
	os.Exit(1)
}
