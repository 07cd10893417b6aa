package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/mcp"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/server"
	"github.com/urfave/cli/v2"
)

// defaultSocket is where `stockade serve` listens unless told otherwise.
const defaultSocket = "/run/stockade/stockade.sock"

// mcpOwnFlags are the flags of `stockade mcp` itself, neither a jail's
// nor a request's (--pool is its own pool's, and so chooses one). The
// flags a request to a server carries are run --server's (remoteFlags,
// from the profile schema); any other needs a jail this process makes.
var mcpOwnFlags = map[string]bool{"http": true}

// mcpCommand is `stockade mcp`: the Model Context Protocol on stdio (or,
// with --http, stateless Streamable HTTP on a loopback port), its tools run
// by a stockade server or by a pool of its own.
func mcpCommand(stdin *os.File, stdout, stderr io.Writer) *cli.Command {
	var flags []cli.Flag
	for _, f := range jailFlags() {
		if f.Names()[0] != "json" {
			flags = append(flags, f)
		}
	}
	flags = append(flags,
		&cli.StringFlag{Name: "server", EnvVars: []string{"STOCKADE_SOCKET"}, Usage: "use the stockade serve listening on this unix socket, or a gateway at https://HOST:PORT (default: " + defaultSocket + " if a server answers there, else a pool of its own)"},
		&cli.StringFlag{Name: "token", EnvVars: []string{"STOCKADE_TOKEN"}, Usage: "with --server https://...: the bearer `TOKEN` the gateway asks for"},
		&cli.StringFlag{Name: "ca-file", Usage: "with --server https://...: the PEM `FILE` of the certificates that may sign the gateway's (default: the system's)"},
		&cli.IntFlag{Name: "pool", Value: 1, Usage: "jails kept prepared when running its own pool (0: none)"},
		&cli.StringFlag{Name: "http", Usage: "serve stateless Streamable HTTP on this loopback address (127.0.0.1:PORT) instead of stdio; anyone on this host who can reach the port can use it"},
	)
	return &cli.Command{
		Name:      "mcp",
		Usage:     "serve the Model Context Protocol on stdio: run_python and sessions, in jails",
		ArgsUsage: "[flags]",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			fail := func(err error) error { return &exitError{code: jail.ExitJailError, msg: err.Error()} }
			if c.NArg() > 0 {
				return fail(fmt.Errorf("mcp: takes no arguments (got %q)", c.Args().First()))
			}
			addr := c.String("http")
			if err := checkLoopback(addr); err != nil {
				return fail(err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			// A host that closed the pipe must not kill stockade while its
			// own pool's jails are up.
			signal.Ignore(syscall.SIGPIPE)
			opts := mcp.Options{Version: version}
			backend, done, err := mcpBackend(ctx, c, &opts, stderr)
			if err != nil {
				return fail(err)
			}
			defer done()
			if addr != "" {
				return mcpServeHTTP(ctx, addr, backend, opts, stderr)
			}
			srv := mcp.NewServer(backend, opts)
			err = srv.Run(ctx, &sdk.IOTransport{Reader: stdin, Writer: nopWriteCloser{stdout}})
			if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) && !errors.Is(err, sdk.ErrConnectionClosed) {
				return fail(fmt.Errorf("mcp: %w", err))
			}
			return nil
		},
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// mcpBackend chooses who runs the tools: the server --server names, the
// default socket's server if one answers and no flag needs a jail of our
// own, or a pool of our own. It says which on stderr. opts gets what a
// server's requests carry: --profile and the limit flags.
func mcpBackend(ctx context.Context, c *cli.Context, opts *mcp.Options, stderr io.Writer) (mcp.Backend, func(), error) {
	own, carried := notCarried(c, mcpOwnFlags)
	sock := c.String("server")
	if sock != "" && len(own) > 0 {
		return nil, nil, fmt.Errorf("%s: not with --server (nor $STOCKADE_SOCKET): the server applies its own profile and pool, and a request carries only %s (set it in a profile on the server, or leave out --server to run a pool of its own)",
			strings.Join(own, ", "), strings.Join(carried, ", "))
	}
	copts := client.Options{Token: c.String("token"), CAFile: c.String("ca-file")}
	if sock == "" && len(own) == 0 {
		if err := probeServer(ctx, defaultSocket, client.Options{}); err == nil {
			sock = defaultSocket
		} else {
			fmt.Fprintf(stderr, "stockade mcp: no server at %s (%v)\n", defaultSocket, err)
		}
	}
	if sock == "" {
		return ownPool(c, stderr)
	}
	if err := probeServer(ctx, sock, copts); err != nil {
		return nil, nil, fmt.Errorf("--server %s: %w", sock, err)
	}
	// The limits are parsed here as a local run's flags are, as run
	// --server's are: a value that does not parse is refused with the
	// flag's name; their ranges and the profile's ceiling are the
	// server's to check.
	layer, err := flagLayer(c)
	if err != nil {
		return nil, nil, err
	}
	cl, err := client.New(sock, copts)
	if err != nil {
		return nil, nil, fmt.Errorf("--server %s: %w", sock, err)
	}
	fmt.Fprintf(stderr, "stockade mcp: using the server at %s\n", sock)
	opts.Profile, opts.Limits = c.String("profile"), server.LimitsOf(layer)
	opts.PoolMissed = poolMissNotice(c, stderr)
	return mcp.Remote(cl), func() {}, nil
}

// poolMissNotice says once on stderr that the limit flags this process
// sends keep every call from the server's warm pool: its prepared jails
// have its profile's limits, and a request's tighter ones need a fresh
// jail each time (docs/mcp.md's first host configuration, --memory 256M,
// paid a cold start on every call in silence).
func poolMissNotice(c *cli.Context, stderr io.Writer) func(string) {
	var given []string
	for _, f := range policyFlags {
		// A timeout is each run's: it keeps no run from a prepared jail.
		if f.field != profiles.FieldTimeout && remoteFlags[f.name] && c.IsSet(f.name) {
			given = append(given, fmt.Sprintf("--%s %s", f.name, c.String(f.name)))
		}
	}
	if len(given) == 0 {
		given = []string{"its limits"}
	}
	var once sync.Once
	return func(reason string) {
		once.Do(func() {
			fmt.Fprintf(stderr, "stockade mcp: the server took a fresh jail, not a prepared one (%s): its prepared jails have its profile's limits, and this process sends %s with every call, so every run_python and create_session waits for a jail's set-up; for warm jails, give the server a profile with these limits and pass --profile, or leave these flags out\n",
				reason, strings.Join(given, " "))
		})
	}
}

// probeServer asks the server at sock for its health.
func probeServer(ctx context.Context, sock string, opts client.Options) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cl, err := client.New(sock, opts)
	if err != nil {
		return err
	}
	_, err = cl.Health(ctx)
	var refused *client.Error
	var ne *net.OpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused):
		return fmt.Errorf("the server refused us: %d %s: %s", refused.Status, http.StatusText(refused.Status), refused.Body.Msg)
	case errors.As(err, &ne):
		return fmt.Errorf("no server answers: %v", ne.Err)
	}
	return fmt.Errorf("no server answers: %v", err)
}

// ownPool runs stockade serve's server in this process, on a socket in a
// private directory (0700, removed at the end), with the profile the flags
// make: the same code, caps and checks as a server, for one client.
func ownPool(c *cli.Context, stderr io.Writer) (mcp.Backend, func(), error) {
	// The flags are one more profile layer over --profile, merged and
	// validated once, as for `stockade run`.
	p, err := loadProfile(c.String("profile"))
	if err != nil {
		return nil, nil, err
	}
	layer, err := flagLayer(c)
	if err != nil {
		return nil, nil, err
	}
	policy := profiles.Merge(p, layer)
	policy.Name = p.Name
	if err := policy.Validate(); err != nil {
		return nil, nil, err
	}
	name := c.String("profile")
	if name == "" {
		name = "python"
	}
	host := hostOf(c)
	// serve's caps, from the one place serve's flags take them: with a
	// zero Config the pool held sessions without limit (40 of 40, 2.5 GB),
	// for whoever reached its --http port.
	cfg := server.Defaults()
	cfg.Profiles, cfg.Host, cfg.Pool = []server.Profile{{Name: name, Policy: policy}}, host, c.Int("pool")
	cfg.Log, cfg.Audit, cfg.Notices, cfg.Facts, cfg.Version = stderr, server.NewAuditWriter(stderr), os.Stderr, hostFacts(host), version
	srv, err := server.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "stockade-mcp-")
	if err != nil {
		return nil, nil, fmt.Errorf("own pool: private socket directory: %w", err)
	}
	sock := filepath.Join(dir, "stockade.sock")
	ln, err := server.Listen(sock, "")
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	fmt.Fprintf(stderr, "stockade mcp: running its own pool (profile %s, %d prepared; at most %d sessions, %d runs at once) on the private socket %s\n",
		name, c.Int("pool"), min(cfg.Sessions, cfg.SessionsPerCaller), cfg.Concurrency, sock)
	done := func() {
		stop()
		if err := <-served; err != nil {
			fmt.Fprintf(stderr, "stockade mcp: own pool: %v\n", err)
		}
		ln.Close()
		os.RemoveAll(dir)
	}
	cl, err := client.New(sock, client.Options{})
	if err != nil {
		done()
		return nil, nil, err
	}
	return mcp.Remote(cl), done, nil
}

// checkLoopback admits "" (stdio) or a loopback address: TCP carries no
// caller identity (no SO_PEERCRED), so --http serves this host only.
func checkLoopback(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want 127.0.0.1:PORT: %v", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--http %q: a loopback address only (127.0.0.1:PORT or [::1]:PORT): TCP carries no caller identity", addr)
	}
	return nil
}

// mcpServeHTTP serves the tools as stateless Streamable HTTP on a
// loopback TCP address, for MCP clients that speak no unix socket. TCP
// carries no caller identity, so this is refused anywhere but loopback.
func mcpServeHTTP(ctx context.Context, addr string, b mcp.Backend, opts mcp.Options, stderr io.Writer) error {
	fail := func(err error) error { return &exitError{code: jail.ExitJailError, msg: err.Error()} }
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fail(fmt.Errorf("--http: %w", err))
	}
	srv := mcp.NewServer(b, opts)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true, PropagateRequestCancellation: true})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "stockade mcp: serving stateless Streamable HTTP at http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.Shutdown(shut)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(fmt.Errorf("--http: %w", err))
	}
	return nil
}
