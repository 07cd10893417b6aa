package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The engine's names: one stream, one consumer, four buckets, and the
// subjects of the nodes.
const (
	StreamName    = "STOCKADE_WORK"
	WorkSubject   = "stockade.work"
	ConsumerName  = "nodes"
	BucketClaims  = "stockade_claims"
	BucketResults = "stockade_results"
	BucketNodes   = "stockade_nodes"
	BucketSession = "stockade_sessions"
	// DupWindow is how long a run id is remembered by the stream: a
	// resubmission within it is the same run.
	DupWindow = 10 * time.Minute
)

// NodeSubject is where a node answers the session requests of gateways.
func NodeSubject(node string) string { return "stockade.node." + node + ".api" }

// InboxPrefix is a role's inbox prefix: each identity may read only its
// own replies (NATS permissions in docs/cluster.md).
func InboxPrefix(role string) string { return "_INBOX_" + role }

// dialer, when not nil, dials the NATS servers (the tests dial into a
// network namespace of their own).
var dialer nats.CustomDialer

// connect opens the role's TLS connection.
func connect(c Config, name, role string, extra ...nats.Option) (*nats.Conn, error) {
	ca, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, fmt.Errorf("cluster: ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("cluster: ca %s: no certificate in it", c.CA)
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("cluster: cert/key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	opts := []nats.Option{nats.Name(name), nats.Secure(tc), nats.CustomInboxPrefix(InboxPrefix(role)),
		nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(5 * time.Second),
		nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(2)}
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	} else if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if dialer != nil {
		opts = append(opts, nats.SetCustomDialer(dialer))
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(strings.Join(c.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to %s: %w", strings.Join(c.URLs, ","), err)
	}
	if err := c.checkPayload(nc.MaxPayload()); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// Setup creates (or updates) the stream, its consumer and the buckets:
// a gateway's identity may, a node's may not.
func Setup(ctx context.Context, js jetstream.JetStream, c Config) error {
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: StreamName, Subjects: []string{WorkSubject}, Retention: jetstream.WorkQueuePolicy,
		Discard: jetstream.DiscardNew, MaxMsgs: c.QueueMax, MaxMsgSize: int32(min(c.MaxRequest+envelope, 1<<30)),
		Duplicates: DupWindow, Replicas: c.Replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", StreamName, err)
	}
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: ConsumerName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.Grace.D(),
		MaxAckPending: -1, Replicas: c.Replicas,
	}); err != nil {
		return fmt.Errorf("cluster: consumer %s: %w", ConsumerName, err)
	}
	for _, b := range []jetstream.KeyValueConfig{
		{Bucket: BucketClaims, TTL: c.ResultTTL.D(), MaxValueSize: 4096},
		// Bounded (results_max_bytes): a stream of its own, so that full
		// it refuses nothing of the others. JetStream refuses to make it
		// larger than the store has room for.
		{Bucket: BucketResults, TTL: c.ResultTTL.D(), MaxValueSize: int32(min(c.MaxResult+envelope, 1<<30)), MaxBytes: c.ResultsMaxBytes},
		// A day: the heartbeat of a node gone that long, and what its
		// sessions' ends were, go.
		{Bucket: BucketNodes, TTL: 24 * time.Hour, MaxValueSize: 4096},
		{Bucket: BucketSession, TTL: 24 * time.Hour, MaxValueSize: 4096},
	} {
		b.Replicas, b.Storage = c.Replicas, jetstream.FileStorage
		if _, err := js.CreateOrUpdateKeyValue(ctx, b); err != nil {
			return fmt.Errorf("cluster: bucket %s: %w", b.Bucket, err)
		}
		// Reads go to the stream's leader: a direct get may be answered
		// by a replica behind it, which would not yet know a session just
		// made, or would show a heartbeat older than it is.
		s, err := js.Stream(ctx, "KV_"+b.Bucket)
		if err != nil {
			return fmt.Errorf("cluster: bucket %s: %w", b.Bucket, err)
		}
		cfg := s.CachedInfo().Config
		// The results bucket, full, drops its oldest results to store a
		// new one (a KV bucket refuses new values): refusing would fail
		// every tenant's runs until result_ttl frees room. A caller who
		// asks for a dropped result is told so (result_evicted).
		discard := jetstream.DiscardNew
		if b.Bucket == BucketResults {
			discard = jetstream.DiscardOld
		}
		if cfg.AllowDirect || cfg.Discard != discard {
			cfg.AllowDirect, cfg.Discard = false, discard
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return fmt.Errorf("cluster: bucket %s: reads from its leader, discard policy: %w", b.Bucket, err)
			}
		}
	}
	return nil
}

// buckets are the four KV buckets, bound.
type buckets struct {
	claims, results, nodes, sessions jetstream.KeyValue
}

func bind(ctx context.Context, js jetstream.JetStream) (buckets, error) {
	var b buckets
	var errs []error
	for _, x := range []struct {
		name string
		dst  *jetstream.KeyValue
	}{{BucketClaims, &b.claims}, {BucketResults, &b.results}, {BucketNodes, &b.nodes}, {BucketSession, &b.sessions}} {
		kv, err := js.KeyValue(ctx, x.name)
		if err != nil {
			errs = append(errs, fmt.Errorf("bucket %s: %w", x.name, err))
			continue
		}
		*x.dst = kv
	}
	return b, errors.Join(errs...)
}
