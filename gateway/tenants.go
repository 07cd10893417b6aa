package gateway

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"
)

// Tenant is who a request comes from and what it may do: the gateway's
// answer to "which uid" on the unix socket.
type Tenant struct {
	Name string
	// Profiles the tenant may name (the first is its default); empty: any
	// the nodes offer.
	Profiles []string
	// MaxSessions is the most sessions the tenant holds at once across
	// the cluster (0: no cap); the backend counts them.
	MaxSessions int
	// MaxRuns is the most runs (POST /v1/run) the tenant has waiting in a
	// gateway at once; past it a run answers 503 with Retry-After. It
	// bounds the tenant's share of the queue and of the results being
	// made: one tenant's flood cannot take the cluster's whole
	// results_max_bytes at once.
	MaxRuns int
	// Limits are the tenant's caps, in a request's "limits" form
	// ({"memory": "256M", "timeout": "30s"}): a request's own limits may
	// only be tighter, and a limit it leaves out gets the cap.
	Limits map[string]any
	// Metrics lets the tenant read GET /v1/metrics, which counts every
	// tenant's requests (an operator's scraper).
	Metrics bool
}

// DefaultMaxRuns is a tenant's max_runs when its entry leaves it out.
const DefaultMaxRuns = 32

// minToken is the shortest token the tenants file takes: 128 bits of
// base64 or hex, so that a token cannot be guessed in any number of
// tries the gateway's logs would not show.
const minToken = 32

// tenantsFile is the TOML of --tenants:
//
//	[tenant.alice]
//	tokens = ["...at least 32 printable characters..."]
//	cert_names = ["alice.clients.example"]   # a client certificate's SAN (CN: see certNames)
//	profiles = ["python", "data"]
//	max_sessions = 4
//	max_runs = 32                            # runs waiting at once in a gateway (DefaultMaxRuns)
//	metrics = false
//	[tenant.alice.limits]
//	memory = "256M"
//	timeout = "30s"
type tenantsFile struct {
	Tenant map[string]tenantEntry `toml:"tenant"`
}

type tenantEntry struct {
	Tokens      []string       `toml:"tokens"`
	CertNames   []string       `toml:"cert_names"`
	Profiles    []string       `toml:"profiles"`
	MaxSessions int            `toml:"max_sessions"`
	MaxRuns     *int           `toml:"max_runs"`
	Metrics     bool           `toml:"metrics"`
	Limits      map[string]any `toml:"limits"`
}

// Tenants is a loaded tenants file: who each token and each client
// certificate name is.
type Tenants struct {
	tokens []tokenEntry
	certs  map[string]*Tenant
	byName map[string]*Tenant
}

type tokenEntry struct {
	sum    [sha256.Size]byte // of the token: every compare is of 32 bytes
	tenant *Tenant
}

// ByToken returns the tenant whose token tok is, or nil. Every token in
// the file is compared, each in constant time and over digests of equal
// length, so that neither the time taken nor where it stops tells a
// caller how much of a token it guessed or how long tokens are.
func (ts *Tenants) ByToken(tok string) *Tenant {
	sum := sha256.Sum256([]byte(tok))
	var found *Tenant
	for i := range ts.tokens {
		if subtle.ConstantTimeCompare(sum[:], ts.tokens[i].sum[:]) == 1 {
			found = ts.tokens[i].tenant
		}
	}
	return found
}

// ByCertName returns the tenant a verified client certificate's name
// (certNames) is, or nil.
func (ts *Tenants) ByCertName(name string) *Tenant {
	return ts.certs[name]
}

// Len is how many tenants the file names.
func (ts *Tenants) Len() int { return len(ts.byName) }

// LoadTenants reads and checks the tenants file at path. The file holds
// secrets: it must be a regular file (not reached through a symlink) of
// the gateway's own user, that nobody else can read or write, as
// internal/lockfile holds its files; a looser file is refused, not read.
func LoadTenants(path string) (*Tenants, error) {
	src, err := readPrivate(path)
	if err != nil {
		return nil, err
	}
	return parseTenants(path, src)
}

// readPrivate reads path if only this user can open it.
func readPrivate(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) {
		// Most often a file an admin made as root for a gateway that
		// runs as its own user: name that user and the fix.
		return nil, fmt.Errorf("tenants file %s: %w (the gateway runs as uid %d: the file must be that user's own, mode 0600: chown it to that user, chmod 600)", path, err, os.Geteuid())
	}
	if err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	if err := privateMode(st); err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	return b.Bytes(), nil
}

// privateMode refuses a file others could read (its tokens would be
// theirs) or write (its tenants would be).
func privateMode(st unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("not a regular file")
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("owned by uid %d, not by the gateway's uid %d", st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return fmt.Errorf("mode %04o lets others read or write its tokens (chmod 600)", st.Mode&0o7777)
	}
	return nil
}

func parseTenants(path string, src []byte) (*Tenants, error) {
	var tf tenantsFile
	md, err := toml.NewDecoder(bytes.NewReader(src)).Decode(&tf)
	if err != nil {
		// A TOML error quotes the line it failed on, which may hold a
		// token: say where, not what.
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("tenants file %s: line %d: not valid TOML", path, pe.Position.Line)
		}
		return nil, fmt.Errorf("tenants file %s: not valid TOML", path)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("tenants file %s: unknown key %s", path, und[0])
	}
	if len(tf.Tenant) == 0 {
		return nil, fmt.Errorf("tenants file %s: no [tenant.NAME] table", path)
	}
	ts := &Tenants{certs: map[string]*Tenant{}, byName: map[string]*Tenant{}}
	seen := map[[sha256.Size]byte]string{}
	for _, name := range slices.Sorted(maps.Keys(tf.Tenant)) {
		e := tf.Tenant[name]
		t, err := e.tenant(name)
		if err != nil {
			return nil, fmt.Errorf("tenants file %s: tenant %q: %w", path, name, err)
		}
		ts.byName[name] = t
		for i, tok := range e.Tokens {
			if err := checkToken(tok); err != nil {
				return nil, fmt.Errorf("tenants file %s: tenant %q: tokens[%d]: %w", path, name, i, err)
			}
			sum := sha256.Sum256([]byte(tok))
			if other, dup := seen[sum]; dup {
				return nil, fmt.Errorf("tenants file %s: tenant %q: tokens[%d]: also a token of tenant %q", path, name, i, other)
			}
			seen[sum] = name
			ts.tokens = append(ts.tokens, tokenEntry{sum: sum, tenant: t})
		}
		for _, cn := range e.CertNames {
			if cn == "" {
				return nil, fmt.Errorf("tenants file %s: tenant %q: an empty cert_names entry", path, name)
			}
			if other, dup := ts.certs[cn]; dup {
				return nil, fmt.Errorf("tenants file %s: tenant %q: cert name %q is also tenant %q's", path, name, cn, other.Name)
			}
			ts.certs[cn] = t
		}
		if len(e.Tokens) == 0 && len(e.CertNames) == 0 {
			return nil, fmt.Errorf("tenants file %s: tenant %q: neither tokens nor cert_names: nobody could be it", path, name)
		}
	}
	return ts, nil
}

// checkToken takes a token a header can carry and nobody guesses. Its
// value is never put in an error.
func checkToken(tok string) error {
	if len(tok) < minToken {
		return fmt.Errorf("%d characters; at least %d (e.g. openssl rand -hex 32)", len(tok), minToken)
	}
	if len(tok) > maxToken {
		return fmt.Errorf("%d characters; at most %d", len(tok), maxToken)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' {
			return fmt.Errorf("character %d is not printable ASCII (a header could not carry it)", i)
		}
	}
	return nil
}

// maxToken is the longest token taken, and read from a header.
const maxToken = 512

func (e tenantEntry) tenant(name string) (*Tenant, error) {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r > '~' || r == '"' }) {
		return nil, errors.New("a name of printable ASCII without spaces or quotes (it goes into logs)")
	}
	if e.MaxSessions < 0 {
		return nil, fmt.Errorf("max_sessions %d: below 0", e.MaxSessions)
	}
	maxRuns := DefaultMaxRuns
	if e.MaxRuns != nil {
		if maxRuns = *e.MaxRuns; maxRuns < 1 {
			return nil, fmt.Errorf("max_runs %d: at least 1 (left out: %d)", maxRuns, DefaultMaxRuns)
		}
	}
	for _, p := range e.Profiles {
		if p == "" || len(p) > 255 || strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return nil, fmt.Errorf("profiles: %q is not a profile name", p)
		}
	}
	t := &Tenant{Name: name, Profiles: e.Profiles, MaxSessions: e.MaxSessions, MaxRuns: maxRuns, Limits: e.Limits, Metrics: e.Metrics}
	// The caps are checked once, here, as a request's limits are: a cap
	// the profiles package would refuse is the file's error, not every
	// request's.
	if _, err := capsLayer(t); err != nil {
		return nil, err
	}
	return t, nil
}
