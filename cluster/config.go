// Package cluster is stockade past one host, on NATS JetStream: the node
// side of `stockade serve --cluster FILE` (Node) and what a gateway
// forwards each authenticated request to (Backend). Everything that is a
// queue, a claim, a dedupe or a liveness record is JetStream's own: a
// WorkQueue stream with a duplicate window, a durable pull consumer, and
// KV buckets (see docs/cluster.md).
package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// Config is the cluster file, JSON, read strictly.
type Config struct {
	// URLs of the NATS servers, tls:// only. A node tries them in this
	// order: its own host's server first.
	URLs []string `json:"urls"`
	// CA verifies the NATS servers; Cert and Key, when given, are this
	// process's client certificate (NATS servers that verify clients).
	CA   string `json:"ca"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
	// The role's NATS identity: User and Password, or a Creds file.
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Creds    string `json:"creds,omitempty"`
	// Node is this host's name (serve --cluster only): its heartbeat key
	// and its subject stockade.node.<name>.api.
	Node string `json:"node,omitempty"`
	// Grace: a node whose heartbeat is older is lost to the gateways; a
	// node that cannot store one for Grace/2 fences itself. Grace/2 must
	// outlast a NATS leader election (up to about 10 s), or a node fences
	// while the cluster merely elects.
	Grace Duration `json:"grace,omitempty"`
	// QueueMax bounds the runs waiting in the stream (past it: 503).
	QueueMax int64 `json:"queue_max,omitempty"`
	// QueueWait is how long a run may wait in the queue before it is
	// answered expired, never started.
	QueueWait Duration `json:"queue_wait,omitempty"`
	// MaxRequest bounds a request over NATS (a run's body, a session
	// request); MaxResult a stored result or a session's answer.
	MaxRequest int64 `json:"max_request,omitempty"`
	MaxResult  int64 `json:"max_result,omitempty"`
	// ResultTTL is how long results and claims are kept.
	ResultTTL Duration `json:"result_ttl,omitempty"`
	// ResultsMaxBytes bounds the results bucket (JetStream's MaxBytes on
	// its stream): full, its oldest results make room for new ones, so
	// that no tenant's flood of results fills the JetStream store the
	// heartbeats, claims and sessions live in. Size it well below the
	// servers' max_file_store (docs/cluster.md).
	ResultsMaxBytes int64 `json:"results_max_bytes,omitempty"`
	// Replicas of the stream and buckets (3 on a three-server cluster).
	Replicas int `json:"replicas,omitempty"`
	// RequestTimeout bounds one session request to a node.
	RequestTimeout Duration `json:"request_timeout,omitempty"`
}

// Duration is a time.Duration written as "10s" in the file.
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("duration %q: want a positive duration such as \"10s\"", s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

var nodeName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// The defaults of what the file leaves out.
const (
	DefaultGrace      = 30 * time.Second
	DefaultQueueMax   = 10000
	DefaultQueueWait  = 60 * time.Second
	DefaultMaxRequest = 4 << 20
	DefaultMaxResult  = 8 << 20
	DefaultResultTTL  = time.Hour
	// DefaultResultsMaxBytes: 1 GiB, a quarter of a 4 GiB store.
	DefaultResultsMaxBytes = 1 << 30
	DefaultReqTimeout      = 10 * time.Minute
)

func (c *Config) defaults() {
	if c.Grace == 0 {
		c.Grace = Duration(DefaultGrace)
	}
	if c.QueueMax == 0 {
		c.QueueMax = DefaultQueueMax
	}
	if c.QueueWait == 0 {
		c.QueueWait = Duration(DefaultQueueWait)
	}
	if c.MaxRequest == 0 {
		c.MaxRequest = DefaultMaxRequest
	}
	if c.MaxResult == 0 {
		c.MaxResult = DefaultMaxResult
	}
	if c.ResultTTL == 0 {
		c.ResultTTL = Duration(DefaultResultTTL)
	}
	if c.ResultsMaxBytes == 0 {
		c.ResultsMaxBytes = DefaultResultsMaxBytes
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = Duration(DefaultReqTimeout)
	}
}

// Validate fills the defaults and checks c; node says whether it is a
// node's file (which must name the node).
func (c *Config) Validate(node bool) error {
	c.defaults()
	var errs []error
	if len(c.URLs) == 0 {
		errs = append(errs, errors.New("urls: none given"))
	}
	for _, u := range c.URLs {
		if !strings.HasPrefix(u, "tls://") {
			errs = append(errs, fmt.Errorf("urls: %q: only tls:// (stockade never speaks to NATS without TLS)", u))
		}
	}
	if c.CA == "" {
		errs = append(errs, errors.New("ca: the CA file that verifies the NATS servers is required"))
	}
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, errors.New("cert and key: give both or neither"))
	}
	if c.Creds != "" && c.User != "" {
		errs = append(errs, errors.New("creds and user: give one identity"))
	}
	if node && !nodeName.MatchString(c.Node) {
		errs = append(errs, fmt.Errorf("node: %q: a name of 1 to 64 letters, digits, _ or - is required", c.Node))
	}
	if c.QueueMax < 1 || c.MaxRequest < 1024 || c.MaxResult < 1024 || c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, errors.New("queue_max ≥ 1, max_request and max_result ≥ 1024, replicas 1 to 5"))
	}
	if c.ResultsMaxBytes < 4*(c.MaxResult+envelope) {
		errs = append(errs, fmt.Errorf("results_max_bytes %d: at least 4 × (max_result + %d) = %d, or a few large results would evict each other before their callers read them",
			c.ResultsMaxBytes, envelope, 4*(c.MaxResult+envelope)))
	}
	return errors.Join(errs...)
}

// envelope is what a message adds around a body it carries (the JSON of
// a job, a call, a reply or a result, headers and all).
const envelope = 4096

// payloadNeeded is the largest NATS message the configuration makes: a
// session's answer or request carries its body base64-encoded (4/3 of
// max_result or max_request) in its envelope.
func (c *Config) payloadNeeded() int64 {
	b64 := func(n int64) int64 { return (n + 2) / 3 * 4 }
	return max(b64(c.MaxResult), b64(c.MaxRequest)) + envelope
}

// checkPayload refuses a configuration whose messages the NATS server
// would refuse (its max_payload, which it says at connect): a session's
// answer over it is never delivered, and its caller would wait
// request_timeout for nothing.
func (c *Config) checkPayload(maxPayload int64) error {
	if need := c.payloadNeeded(); need > maxPayload {
		return fmt.Errorf("cluster: max_result %d and max_request %d make NATS messages of up to %d bytes (a session's answer travels base64-encoded), "+
			"over the NATS server's max_payload of %d: raise max_payload in nats.conf to at least %d (NATS takes up to 64MB), or lower max_result and max_request",
			c.MaxResult, c.MaxRequest, need, maxPayload, need)
	}
	return nil
}

// maxConfigFile bounds the file read.
const maxConfigFile = 1 << 20

// Load reads and checks the cluster file.
func Load(path string, node bool) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("cluster file: %w", err)
	}
	if len(b) > maxConfigFile {
		return c, fmt.Errorf("cluster file %s: over %d bytes", path, maxConfigFile)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return c, fmt.Errorf("cluster file %s: %w", path, err)
	}
	if err := c.Validate(node); err != nil {
		return c, fmt.Errorf("cluster file %s: %w", path, err)
	}
	return c, nil
}
