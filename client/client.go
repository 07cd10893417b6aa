// Package client is the Go client of stockade's HTTP API (stockade serve):
// runs, streamed or not, sessions and their files, health. It speaks the
// wire types of package api, over the server's unix socket or over HTTPS
// with a bearer token (a gateway in front of servers).
//
// Every answer is read with one bound (Options.MaxAnswer): a larger body,
// or a stream line without end, is refused, never held.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/stockade/stockade/api"
)

// MaxAnswer is the largest answer a client reads unless Options says
// otherwise: the server's own caps (--files-max, output limits) keep real
// ones far below it. The Python client's is the same.
const MaxAnswer = 256 << 20

// Options are how a client reaches a server beyond its address.
type Options struct {
	// Token is sent as "Authorization: Bearer TOKEN" with every request
	// (a gateway's; a server on a unix socket knows its caller by uid).
	Token string
	// CAFile is a PEM file of the certificates that may sign the HTTPS
	// server's; empty, the system's roots.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key (PEM),
	// for a server that asks for one; both or neither.
	CertFile, KeyFile string
	// MaxAnswer bounds an answer's body, and each line of a stream; 0 is
	// MaxAnswer.
	MaxAnswer int64
}

// Client talks to one server. It is safe for concurrent use.
type Client struct {
	hc    *http.Client
	base  string // scheme and host the targets are joined to
	token string
	max   int64
}

// New returns a client for server: "https://HOST:PORT" (a gateway), or a
// unix socket's path, written as it is or as "unix:PATH".
func New(server string, opts Options) (*Client, error) {
	c := &Client{token: opts.Token, max: opts.MaxAnswer}
	if c.max <= 0 {
		c.max = MaxAnswer
	}
	if strings.ContainsAny(c.token, "\r\n") {
		return nil, errors.New("token: contains a line break")
	}
	tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: true}
	switch u, err := url.Parse(server); {
	case err == nil && u.Scheme == "https":
		if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("server %q: want https://HOST:PORT", server)
		}
		cfg, err := tlsConfig(opts)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
		c.base = "https://" + u.Host
	case err == nil && u.Scheme != "" && u.Scheme != "unix":
		// A token must not cross the network in clear, and a server
		// serves plain HTTP only on its unix socket.
		return nil, fmt.Errorf("server %q: want https://HOST:PORT or a unix socket's path", server)
	default:
		if opts.CAFile != "" || opts.CertFile != "" || opts.KeyFile != "" {
			return nil, fmt.Errorf("server %q: a unix socket takes no certificates", server)
		}
		socket := strings.TrimPrefix(server, "unix:")
		if socket == "" {
			return nil, errors.New("server: no socket path")
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
		c.base = "http://stockade"
	}
	c.hc = &http.Client{Transport: tr, CheckRedirect: noRedirects}
	return c, nil
}

// Over returns a client whose requests rt serves, in process: the
// gateway's own /v1/mcp, whose tools' requests go through the gateway's
// checks as the tenant that called them. No certificate or token crosses
// (rt decides who the caller is); opts.MaxAnswer still bounds each answer.
func Over(rt http.RoundTripper, opts Options) *Client {
	c := &Client{base: "http://stockade", max: opts.MaxAnswer}
	if c.max <= 0 {
		c.max = MaxAnswer
	}
	c.hc = &http.Client{Transport: rt, CheckRedirect: noRedirects}
	return c
}

// noRedirects keeps a redirect as the answer: the API never redirects,
// and following one would send the token (and the code) wherever the
// answer points.
func noRedirects(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}

func tlsConfig(opts Options) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", opts.CAFile)
		}
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("client certificate: give both the certificate and its key")
	}
	if opts.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Error is an answer that refused the request: its status and the
// server's error body.
type Error struct {
	Method, Target string
	Status         int
	Body           api.Error // the server's reason in Body.Msg; empty if it gave none
}

func (e *Error) Error() string {
	msg := e.Body.Msg
	if msg == "" {
		msg = "(no reason given)"
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Target, e.Status, http.StatusText(e.Status), msg)
}

// call is one request: what to send and how to read the answer.
type call struct {
	method, target string
	body           io.Reader
	ctype          string
	stream         *Output // non-nil: ask for NDJSON, hand it the output
	ok             int     // the status of success
	// resultOn500 takes a 500 with a verdict as the answer: a run whose
	// jail could not be set up is answered so, and that is its result.
	resultOn500 bool
}

// Output takes a streamed answer's output as it comes; nil writers drop
// it.
type Output struct {
	Stdout, Stderr io.Writer
}

// do sends c and decodes its answer into v.
func (cl *Client) do(ctx context.Context, c call, v any) error {
	body, err := cl.send(ctx, c)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: an answer that is not the JSON expected: %w", c.method, c.target, err)
	}
	return nil
}

// send sends c and returns its answer's body (a stream's result line).
func (cl *Client) send(ctx context.Context, c call) ([]byte, error) {
	resp, err := cl.open(ctx, c)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	what := c.method + " " + c.target
	var body []byte
	if c.stream != nil && resp.Header.Get("Content-Type") == api.NDJSON {
		body, err = readStream(resp.Body, cl.max, what, *c.stream)
	} else {
		body, err = readAnswer(resp, cl.max, what)
	}
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != c.ok && !(c.resultOn500 && resp.StatusCode == 500 && hasVerdict(body)) {
		return nil, refusal(c, resp.StatusCode, body)
	}
	if c.stream != nil && resp.Header.Get("Content-Type") != api.NDJSON {
		if err := writeWhole(body, what, *c.stream); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// refusal is the *Error of an answer with status and body.
func refusal(c call, status int, body []byte) *Error {
	e := &Error{Method: c.method, Target: c.target, Status: status}
	_ = json.Unmarshal(body, &e.Body)
	e.Body.Status = status
	return e
}

// open sends c's request and returns the answer, its body unread.
func (cl *Client) open(ctx context.Context, c call) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, c.method, cl.base+c.target, c.body)
	if err != nil {
		return nil, err
	}
	if c.ctype != "" {
		hr.Header.Set("Content-Type", c.ctype)
	}
	if c.stream != nil {
		hr.Header.Set("Accept", api.NDJSON)
	}
	if cl.token != "" {
		hr.Header.Set("Authorization", "Bearer "+cl.token)
	}
	resp, err := cl.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.method, c.target, err)
	}
	return resp, nil
}

// hasVerdict says whether an answer is a result: a refusal is {"error":
// ...}, which would also fill a result's error field.
func hasVerdict(body []byte) bool {
	var probe struct {
		Verdict *string `json:"verdict"`
	}
	return json.Unmarshal(body, &probe) == nil && probe.Verdict != nil
}

func jsonCall(method, target string, req any, ok int) (call, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return call{}, err
	}
	return call{method: method, target: target, body: bytes.NewReader(b), ctype: "application/json", ok: ok}, nil
}

// Run runs req and returns its result once it ended. A run's verdict,
// whatever it is, is a result; an error is a request the server refused
// (*Error) or could not be asked.
func (cl *Client) Run(ctx context.Context, req *api.RunRequest) (*api.RunResponse, error) {
	return cl.run(ctx, req, nil)
}

// RunStream runs req with its output streamed: out's writers get the
// program's stdout and stderr as it writes them, then the result comes
// (its Stdout and Stderr hold the same).
func (cl *Client) RunStream(ctx context.Context, req *api.RunRequest, out Output) (*api.RunResponse, error) {
	return cl.run(ctx, req, &out)
}

func (cl *Client) run(ctx context.Context, req *api.RunRequest, out *Output) (*api.RunResponse, error) {
	c, err := jsonCall(http.MethodPost, "/v1/run", req, 200)
	if err != nil {
		return nil, err
	}
	c.stream, c.resultOn500 = out, true
	var res api.RunResponse
	if err := cl.do(ctx, c, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Health is GET /v1/health.
func (cl *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	if err := cl.do(ctx, call{method: http.MethodGet, target: "/v1/health", ok: 200}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}
