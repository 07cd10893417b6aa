package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/stockade/stockade/gateway"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/profiles"
	"github.com/urfave/cli/v2"
)

func gatewayCommand(stderr io.Writer) *cli.Command {
	d := gateway.Defaults()
	return &cli.Command{
		Name:  "gateway",
		Usage: "serve the /v1 API over HTTPS to tenants, in front of a cluster of stockade serve --cluster nodes",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: ":8443", Usage: "TCP address to serve HTTPS on (TLS only: there is no plain listener)"},
			&cli.StringFlag{Name: "cert", Usage: "the gateway's TLS certificate (PEM, with its chain); reread with --key and --client-ca on SIGHUP, all or none with the tenants file; required"},
			&cli.StringFlag{Name: "key", Usage: "the certificate's private key (PEM); required"},
			&cli.StringFlag{Name: "client-ca", Usage: "CA certificates (PEM) that client certificates are verified against: mutual TLS, the tenant named by the certificate's SANs (its CN only when it has none and no CA in its chain is name-constrained)"},
			&cli.StringFlag{Name: "tenants", Usage: "the tenants file (TOML, mode 0600): tokens, certificate names and each tenant's policy; reread on SIGHUP; required"},
			&cli.StringFlag{Name: "cluster", Usage: "the cluster file (NATS URLs, TLS, credentials) of the nodes' cluster; required"},
			&cli.StringFlag{Name: "max-body", Value: profiles.FormatSize(d.MaxBody), Usage: "largest request body forwarded (413 past it, before it is forwarded)"},
			&cli.IntFlag{Name: "per-tenant", Value: d.PerTenant, Usage: "requests one tenant may have in this gateway at once (429 past it, before the body is read)"},
			&cli.StringFlag{Name: "body-timeout", Value: flagDuration(d.BodyTimeout), Usage: "how long a request body may take to arrive before 408"},
			&cli.StringFlag{Name: "grace", Value: "30s", Usage: "on SIGTERM, how long requests in flight may finish"},
			&cli.StringFlag{Name: "audit-log", Value: "-", Usage: `one JSON line per request, naming the tenant: a FILE (appended, 0600; reopened on SIGHUP, for logrotate), "-" for stderr`},
		},
		Action: func(c *cli.Context) error {
			fail := func(err error) error { return &exitError{code: jail.ExitJailError, msg: err.Error()} }
			// The signals are ours from the start: a SIGHUP (systemctl
			// reload) while the cluster is dialled would otherwise end the
			// process (Go's default); it is a reload once the gateway serves.
			signal.Ignore(syscall.SIGPIPE)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			cfg := gateway.Config{TenantsFile: c.String("tenants"), CertFile: c.String("cert"), KeyFile: c.String("key"), ClientCAFile: c.String("client-ca"), PerTenant: c.Int("per-tenant"), Version: version,
				Logf: func(format string, a ...any) { fmt.Fprintf(stderr, "stockade gateway: "+format+"\n", a...) }}
			var err error
			if cfg.PerTenant < 1 {
				return fail(fmt.Errorf("--per-tenant %d: at least 1", cfg.PerTenant))
			}
			if cfg.MaxBody, err = profiles.ParseSize(c.String("max-body")); err != nil {
				return fail(fmt.Errorf("--max-body: %w", err))
			}
			if cfg.BodyTimeout, err = profiles.ParseDuration(c.String("body-timeout")); err != nil {
				return fail(fmt.Errorf("--body-timeout: %w", err))
			}
			grace, err := profiles.ParseDuration(c.String("grace"))
			if err != nil {
				return fail(fmt.Errorf("--grace: %w", err))
			}
			var auditFile *reopenable
			switch a := c.String("audit-log"); a {
			case "-":
				cfg.Audit = stderr
			default:
				if auditFile, err = openReopenable(a); err != nil {
					return fail(fmt.Errorf("--audit-log: %w", err))
				}
				defer auditFile.Close()
				cfg.Audit = auditFile
			}
			// The certificate, key and tenants are checked before the
			// cluster is dialled: a gateway without TLS never gets as far.
			if _, err := gateway.New(cfg, noBackend{}); err != nil {
				return fail(err)
			}
			if c.String("cluster") == "" {
				return fail(fmt.Errorf("gateway: --cluster FILE is required (the nodes' cluster)"))
			}
			backend, closeBackend, err := clusterBackend(ctx, c.String("cluster"))
			if err != nil {
				return fail(err)
			}
			defer closeBackend()
			g, err := gateway.New(cfg, backend)
			if err != nil {
				return fail(err)
			}
			// SIGHUP: the tenants file, the certificate, its key and the
			// client CAs are read again, all or none, and the audit log
			// reopened, as logrotate's postrotate expects.
			go g.ReloadOn(ctx, hup, func(err error) {
				if auditFile != nil {
					if rerr := auditFile.Reopen(); rerr != nil {
						fmt.Fprintf(stderr, "stockade gateway: --audit-log: %v (still writing to the old file)\n", rerr)
					}
				}
				if err != nil {
					fmt.Fprintf(stderr, "stockade gateway: %v\n", err)
					return
				}
				fmt.Fprintf(stderr, "stockade gateway: tenants reloaded from %s, certificate from %s\n", cfg.TenantsFile, cfg.CertFile)
			})
			ln, err := net.Listen("tcp", c.String("listen"))
			if errors.Is(err, syscall.EACCES) {
				return fail(fmt.Errorf("gateway: %w (a port below 1024 needs root or CAP_NET_BIND_SERVICE: AmbientCapabilities=CAP_NET_BIND_SERVICE in its unit; or --listen on a port of 1024 or more)", err))
			}
			if err != nil {
				return fail(fmt.Errorf("gateway: %w", err))
			}
			defer ln.Close()
			fmt.Fprintf(stderr, "stockade gateway: serving HTTPS on %s\n", ln.Addr())
			if err := g.Serve(ctx, ln, grace); err != nil {
				return fail(err)
			}
			return nil
		},
	}
}

// noBackend stands in while the gateway's own configuration is checked.
type noBackend struct{ gateway.Backend }

// reopenable is an append-only file that SIGHUP reopens by its path.
type reopenable struct {
	mu   sync.Mutex
	path string
	f    *os.File
}

func openReopenable(path string) (*reopenable, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return &reopenable{path: path, f: f}, nil
}

func (r *reopenable) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Write(p)
}

// Reopen opens the path again (a new file, after a rotation); on failure
// the old file stays.
func (r *reopenable) Reopen() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	return old.Close()
}

func (r *reopenable) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}
