package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/cgroup"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/stockade/stockade/server"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// serveCommand is `stockade serve`: the flags become a server.Config, the
// profiles are resolved here, and the server package does the rest. The
// flags' defaults are server.Defaults, which `stockade mcp`'s own pool
// runs with too.
func serveCommand(stderr io.Writer) *cli.Command {
	d := server.Defaults()
	return &cli.Command{
		Name:  "serve",
		Usage: "serve runs over HTTP/1.1 + JSON on a unix socket, from a pool of prepared jails",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "socket", Value: "/run/stockade/stockade.sock", Usage: "unix socket to listen on (ignored under systemd socket activation)"},
			&cli.StringFlag{Name: "group", Usage: "group that owns the socket (mode 0660)"},
			&cli.StringSliceFlag{Name: "profile", Usage: "profile to offer (repeatable; the first is the default)", DefaultText: "python"},
			&cli.IntFlag{Name: "pool", Value: d.Pool, Usage: "jails kept prepared per profile (0: none)"},
			&cli.StringFlag{Name: "session-start-timeout", Hidden: true, Usage: "how long a session's interpreter may take to start (a vm session's guest server is given more under emulation)"},
			&cli.BoolFlag{Name: "upstream-decides", Hidden: true, Usage: "HTTPS_PROXY is a stockade egress proxy with the same rules that decides again (a vm session's guest server: the host's proxy over the network channel)"},
			&cli.IntFlag{Name: "vm-pool", Value: d.VMPool, Usage: `guests kept booted per profile with isolation = "vm", each waiting for a session (0: none; a session then waits a boot)`},
			&cli.IntFlag{Name: "concurrency", Value: d.Concurrency, Usage: "runs at once"},
			&cli.IntFlag{Name: "queue", Value: d.Queue, Usage: "requests that may wait for a run slot"},
			&cli.StringFlag{Name: "queue-wait", Value: flagDuration(d.QueueWait), Usage: "how long a request may wait before 503"},
			&cli.IntFlag{Name: "per-caller", Usage: "requests at once per caller uid, counted before the body is read: being read, waiting or running (0: no cap)"},
			&cli.StringFlag{Name: "max-body", Value: profiles.FormatSize(d.MaxBody), Usage: "largest request body"},
			&cli.StringFlag{Name: "body-budget", Value: profiles.FormatSize(d.BodyBudget), Usage: "bytes of request bodies held at once (being read, waiting or running); a body that does not fit waits like a queued request, then gets 503"},
			&cli.StringFlag{Name: "body-timeout", Value: flagDuration(d.BodyTimeout), Usage: "how long a request body may take to arrive before 408"},
			&cli.StringFlag{Name: "write-timeout", Value: flagDuration(d.WriteTimeout), Usage: "how long the caller may take to read one response (or one streamed line) before the run is cancelled and the connection dropped"},
			&cli.StringFlag{Name: "idle-timeout", Value: flagDuration(d.IdleTimeout), Usage: "how long a keep-alive connection may wait for its next request before it is closed"},
			&cli.IntFlag{Name: "max-conns", Value: d.MaxConns, Usage: "connections open at once; past it a connection gets 503 and is closed"},
			&cli.IntFlag{Name: "max-conns-per-caller", Value: d.MaxConnsPerCaller, Usage: "connections open at once per caller uid"},
			&cli.StringFlag{Name: "files-max", Value: profiles.FormatSize(d.FilesMax), Usage: "bytes of files and images one response returns"},
			&cli.StringSliceFlag{Name: "allow-uid", Usage: "caller uid allowed (repeatable; default: anyone who can open the socket)"},
			&cli.StringFlag{Name: "budget-memory", Usage: "memory all live jails (waiting and running) may hold together (0: no budget)"},
			&cli.Int64Flag{Name: "budget-pids", Usage: "pids all live jails may hold together (0: no budget)"},
			&cli.StringFlag{Name: "session-idle", Value: flagDuration(d.SessionIdle), Usage: "the longest a session may go without a request before it ends (and its default idle_timeout)"},
			&cli.StringFlag{Name: "session-ttl", Value: flagDuration(d.SessionTTL), Usage: "the longest ttl a session may ask for, when made or by POST .../ttl (and its default ttl)"},
			&cli.StringFlag{Name: "session-max-life", Usage: "the longest a session may live from its start, however often its ttl is moved", DefaultText: "--session-ttl"},
			&cli.IntFlag{Name: "sessions", Value: d.Sessions, Usage: "sessions the server holds at once, live or ended and kept for their /work (0: no cap)"},
			&cli.IntFlag{Name: "sessions-per-caller", Value: d.SessionsPerCaller, Usage: "sessions one caller uid holds at once (0: no cap)"},
			&cli.StringFlag{Name: "grace", Value: flagDuration(d.Grace), Usage: "on SIGTERM, how long running jails may finish before they are killed"},
			&cli.StringFlag{Name: "audit-log", Value: "-", Usage: `one JSON line per run: a FILE (appended; reopened on SIGHUP, for logrotate), "-" for stderr, "" for none`},
			&cli.BoolFlag{Name: "audit-required", Usage: "no run without its audit line: a start line is written before the code reaches the jail, and a run whose line cannot be written is refused (503)"},
		}, append(sessionFlags(),
			&cli.StringFlag{Name: "cluster", Usage: "join the NATS JetStream cluster this JSON FILE names (docs/cluster.md): take runs from its queue while a slot is free, answer its gateways' session requests"},
			&cli.StringFlag{Name: "drain-sessions", Value: "0s", Usage: "with --cluster, on SIGTERM: how long the host's sessions get to end by themselves (their owners still reach them) before they end with verdict shutdown; runs get --grace meanwhile"},
			&cli.StringFlag{Name: "cgroup-parent", Usage: "create the jails' cgroups below this path (default: $STOCKADE_CGROUP_PARENT, else stockade's own cgroup)"})...),
		Action: func(c *cli.Context) error {
			fail := func(err error) error { return &exitError{code: jail.ExitJailError, msg: err.Error()} }
			// The signals are ours before the socket exists: a SIGTERM or
			// SIGHUP in between would otherwise end the process at once
			// (Go's default), leaving the socket behind. A client that went
			// away mid-response must not kill the server either.
			signal.Ignore(syscall.SIGPIPE)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			cfg, err := serveConfig(c, stderr)
			if err != nil {
				return fail(err)
			}
			if err := serveCgroup(cfg.Host); err != nil {
				return fail(err)
			}
			if c.IsSet("drain-sessions") && c.String("cluster") == "" {
				return fail(fmt.Errorf("--drain-sessions is for a node of a cluster (--cluster FILE)"))
			}
			drainSessions, err := profiles.ParseDuration(c.String("drain-sessions"))
			if err != nil || drainSessions < 0 {
				return fail(fmt.Errorf("--drain-sessions %q: a duration of 0 or more (30s, 5m)", c.String("drain-sessions")))
			}
			defer cfg.Audit.Close()
			srv, err := server.New(cfg)
			if err != nil {
				return fail(err)
			}
			ln, err := server.Listen(c.String("socket"), c.String("group"))
			if err != nil {
				return fail(err)
			}
			defer ln.Close()
			// SIGHUP reopens the audit log, as logrotate's postrotate
			// expects; it stops nothing.
			served := make(chan struct{})
			defer close(served)
			go func() {
				for {
					select {
					case <-hup:
						srv.ReopenAuditLog()
					case <-served:
						return
					}
				}
			}()
			fmt.Fprintf(stderr, "stockade serve: listening on %s (pool %d per profile, %d at once)\n", ln.Addr(), cfg.Pool, cfg.Concurrency)
			if f := c.String("cluster"); f != "" {
				return serveCluster(ctx, f, srv, ln, cfg.Grace, drainSessions, fail)
			}
			if err := srv.Serve(ctx, ln); err != nil {
				return fail(err)
			}
			return nil
		},
	}
}

// serveCgroup refuses a server whose jails would have no cgroup to go in
// (a normal user without a delegated one, a read-only cgroupfs): it would
// listen and answer every run with that error. A server has no
// --no-cgroup, so the way out named is a cgroup, never that flag.
func serveCgroup(host jail.Host) error {
	m, err := cgroup.NewManager(cgroup.Options{Parent: host.CgroupParent})
	if err == nil {
		err = m.Check(cgroup.Limits{MemoryMax: 1 << 30, CPUs: 1, PidsMax: 64})
		if cerr := m.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("serve: the jails' cgroup: %w (%s; a server runs no jail without its limits)", err, jail.CgroupFix(err, false))
	}
	return nil
}

// flagDuration is a default duration as a flag's value is written: "10m",
// not time.Duration's "10m0s".
func flagDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func serveConfig(c *cli.Context, stderr io.Writer) (server.Config, error) {
	if c.Int("vm-pool") < 0 {
		return server.Config{}, fmt.Errorf("--vm-pool %d: must not be negative (0: none)", c.Int("vm-pool"))
	}
	cfg := server.Config{Pool: c.Int("pool"), VMPool: c.Int("vm-pool"), Concurrency: c.Int("concurrency"), Queue: c.Int("queue"),
		PerCaller: c.Int("per-caller"), MaxConns: c.Int("max-conns"), MaxConnsPerCaller: c.Int("max-conns-per-caller"), BudgetPids: c.Int64("budget-pids"), Log: stderr,
		Sessions: c.Int("sessions"), SessionsPerCaller: c.Int("sessions-per-caller"),
		Notices: os.Stderr, Version: version, Host: hostOf(c)}
	cfg.Host.UpstreamDecides = c.Bool("upstream-decides")
	cfg.Facts = hostFacts(cfg.Host)
	var err error
	if cfg.QueueWait, err = profiles.ParseDuration(c.String("queue-wait")); err != nil {
		return cfg, fmt.Errorf("--queue-wait: %w", err)
	}
	if cfg.Grace, err = profiles.ParseDuration(c.String("grace")); err != nil {
		return cfg, fmt.Errorf("--grace: %w", err)
	}
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{"session-idle", &cfg.SessionIdle}, {"session-ttl", &cfg.SessionTTL}} {
		if *f.dst, err = profiles.ParseDuration(c.String(f.name)); err != nil {
			return cfg, fmt.Errorf("--%s: %w", f.name, err)
		}
		if *f.dst <= 0 {
			return cfg, fmt.Errorf("--%s %s: must be more than 0", f.name, c.String(f.name))
		}
	}
	if v := c.String("session-max-life"); v != "" {
		if cfg.SessionMaxLife, err = profiles.ParseDuration(v); err != nil {
			return cfg, fmt.Errorf("--session-max-life: %w", err)
		}
		if cfg.SessionMaxLife < cfg.SessionTTL {
			return cfg, fmt.Errorf("--session-max-life %s: less than --session-ttl %s, which a session may ask for", v, c.String("session-ttl"))
		}
	}
	if cfg.SessionLayer, err = sessionLayer(c); err != nil {
		return cfg, err
	}
	for _, f := range []string{"sessions", "sessions-per-caller"} {
		if c.Int(f) < 0 {
			return cfg, fmt.Errorf("--%s %d: must not be negative (0: no cap)", f, c.Int(f))
		}
	}
	if v := c.String("session-start-timeout"); v != "" {
		if cfg.SessionStart, err = profiles.ParseDuration(v); err != nil {
			return cfg, fmt.Errorf("--session-start-timeout: %w", err)
		}
	}
	if cfg.BodyTimeout, err = profiles.ParseDuration(c.String("body-timeout")); err != nil {
		return cfg, fmt.Errorf("--body-timeout: %w", err)
	}
	if cfg.WriteTimeout, err = profiles.ParseDuration(c.String("write-timeout")); err != nil {
		return cfg, fmt.Errorf("--write-timeout: %w", err)
	}
	if cfg.IdleTimeout, err = profiles.ParseDuration(c.String("idle-timeout")); err != nil {
		return cfg, fmt.Errorf("--idle-timeout: %w", err)
	}
	for _, f := range []string{"max-conns", "max-conns-per-caller"} {
		if c.IsSet(f) && c.Int(f) <= 0 {
			return cfg, fmt.Errorf("--%s %d: must be at least 1", f, c.Int(f))
		}
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"max-body", &cfg.MaxBody}, {"body-budget", &cfg.BodyBudget}, {"files-max", &cfg.FilesMax}, {"budget-memory", &cfg.BudgetMemory}} {
		if v := c.String(f.name); v != "" {
			if *f.dst, err = profiles.ParseSize(v); err != nil {
				return cfg, fmt.Errorf("--%s: %w", f.name, err)
			}
		}
	}
	for _, u := range c.StringSlice("allow-uid") {
		n, err := strconv.ParseUint(u, 10, 32)
		if err != nil {
			return cfg, fmt.Errorf("--allow-uid %q: want a numeric uid", u)
		}
		cfg.AllowUIDs = append(cfg.AllowUIDs, uint32(n))
	}
	names := c.StringSlice("profile")
	if len(names) == 0 {
		names = []string{"python"}
	}
	for _, n := range names {
		p, err := loadProfile(n)
		if err != nil {
			return cfg, err
		}
		cfg.Profiles = append(cfg.Profiles, server.Profile{Name: n, Policy: p})
	}
	cfg.AuditRequired = c.Bool("audit-required")
	switch a := c.String("audit-log"); a {
	case "":
	case "-":
		cfg.Audit = server.NewAuditWriter(stderr)
	default:
		if cfg.Audit, err = server.OpenAuditLog(a); err != nil {
			return cfg, fmt.Errorf("--audit-log: %w", err)
		}
	}
	return cfg, nil
}

// remoteFlags are the flags of run that `run --server` carries to the
// server: the request's profile name and the flags of the limits a request
// may tighten (profiles.TightenableFields, the same list the server takes).
// Every other flag of run, if given, is refused rather than dropped: a
// dropped --work-size 1M or --allow-net would leave the server profile's
// looser value in force, and the user who asked for a tighter jail would
// get a looser one in silence.
var remoteFlags = carriedFlags()

// connectionFlags say how to reach the server, not what to run.
var connectionFlags = map[string]bool{"server": true, "token": true, "ca-file": true}

func carriedFlags() map[string]bool {
	m := map[string]bool{"server": true, "token": true, "ca-file": true, "profile": true, "json": true}
	for _, f := range policyFlags {
		if slices.Contains(profiles.TightenableFields(), f.field) {
			m[f.name] = true
		}
	}
	return m
}

// notCarried are the flags given to c that a request to a server does not
// carry (remoteFlags) and that are not the command's own (own), sorted;
// carried are the flags of c's command a request does carry, for the
// refusal to name.
func notCarried(c *cli.Context, own map[string]bool) (given, carried []string) {
	for _, n := range c.LocalFlagNames() {
		if !remoteFlags[n] && !own[n] {
			given = append(given, "--"+n)
		}
	}
	sort.Strings(given)
	for _, f := range c.Command.Flags {
		if n := f.Names()[0]; remoteFlags[n] && !connectionFlags[n] {
			carried = append(carried, "--"+n)
		}
	}
	return given, carried
}

// runRemote is `stockade run --server SOCK|https://HOST:PORT`: the same
// run, by a server (or a gateway in front of servers).
// Only the limits a request may carry are sent; flags that change the
// jail itself belong to the server's profiles.
func runRemote(c *cli.Context, argv []string, stdin *os.File, stdout, stderr io.Writer) error {
	fail := func(format string, a ...any) error {
		return &exitError{code: jail.ExitJailError, msg: fmt.Sprintf(format, a...)}
	}
	// The flags given, asked once, as flagLayer does; the rule is what is
	// not carried is refused, so a flag added to run is refused here until
	// the request can carry it.
	if refused, carried := notCarried(c, nil); len(refused) > 0 {
		return fail("%s: not with --server: the server applies its own profile, and a request carries only %s (set it in a profile on the server and pass --profile, or run without --server)",
			strings.Join(refused, ", "), strings.Join(carried, ", "))
	}
	// The limits are parsed here as a local run's flags are, so a value
	// that does not parse is refused with the flag's name; their ranges
	// and the profile's ceiling are the server's to check.
	layer, err := flagLayer(c)
	if err != nil {
		return fail("%v", err)
	}
	req := &api.RunRequest{Argv: argv, Profile: c.String("profile"), Limits: server.LimitsOf(layer)}
	if stdin != nil && !isTerminal(stdin) {
		b, err := io.ReadAll(io.LimitReader(stdin, 16<<20+1))
		if err != nil {
			return fail("read stdin: %v", err)
		}
		if len(b) > 16<<20 {
			return fail("stdin: more than 16 MiB; a server run takes its stdin whole")
		}
		req.Stdin = string(b)
	}
	asJSON := c.Bool("json")
	out, errw := stdout, stderr
	if asJSON {
		out, errw = io.Discard, io.Discard
	}
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	cl, err := client.New(c.String("server"), client.Options{Token: c.String("token"), CAFile: c.String("ca-file")})
	if err != nil {
		return fail("--server: %v", err)
	}
	res, err := cl.RunStream(ctx, req, client.Output{Stdout: out, Stderr: errw})
	if err != nil {
		return fail("%v", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res); err != nil {
			return fail("write result: %v", err)
		}
		return &exitError{code: res.ExitCode}
	}
	if res.Error != nil {
		return &exitError{code: res.ExitCode, msg: *res.Error}
	}
	for _, line := range explain(res.Result) {
		fmt.Fprintln(stderr, "stockade:", line)
	}
	return &exitError{code: res.ExitCode}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// sessionFlags are serve's --session-FLAG for each field a session's
// execs take from the server (server.SessionFields): the schema's own
// flag name and help, the default shown the session layer's
// (server.SessionDefaults) or else the profile's.
func sessionFlags() []cli.Flag {
	defaults := server.SessionDefaults()
	var flags []cli.Flag
	for _, f := range profiles.Flags() {
		if !slices.Contains(server.SessionFields(), f.Field) {
			continue
		}
		def := "the profile's"
		if defaults.IsSet(f.Field) {
			def = defaults.Text(f.Field)
		}
		flags = append(flags, &cli.StringFlag{Name: "session-" + f.Name, Usage: "each session exec's " + f.Usage + "; /v1/run keeps the profile's", DefaultText: def})
	}
	return flags
}

// sessionLayer is the profile layer of the --session-FLAGs given, each
// value set through Profile.Set with its flag as origin, so a bad value
// gets the error a profile file's would; server.New merges it over every
// offered profile (and SessionDefaults) for sessions and validates it.
func sessionLayer(c *cli.Context) (*profiles.Profile, error) {
	layer := &profiles.Profile{Name: "serve --session flags"}
	given := false
	for _, f := range profiles.Flags() {
		name := "session-" + f.Name
		if !slices.Contains(server.SessionFields(), f.Field) || !c.IsSet(name) {
			continue
		}
		if err := layer.Set(f.Field, c.String(name), profiles.Origin{File: "--" + name}); err != nil {
			return nil, err
		}
		given = true
	}
	if !given {
		return nil, nil
	}
	return layer, nil
}
