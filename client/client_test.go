package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/internal/certtest"
)

// These tests answer the client with handlers of their own, over a unix
// socket or HTTPS, and check what it sent and what it made of the answer.

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// unixServer serves h on a socket in a temporary directory.
func unixServer(t *testing.T, h http.Handler) string {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func unixClient(t *testing.T, h http.HandlerFunc, opts Options) *Client {
	c, err := New(unixServer(t, h), opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func TestRunSendsTheRequestAndReadsTheResult(t *testing.T) {
	code := "print(6*7)"
	var got api.RunRequest
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/run" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Accept") != "" {
			t.Errorf("%s %s, Content-Type %q, Accept %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Accept"))
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		writeJSON(w, 200, api.RunResponse{Result: &api.Result{Verdict: api.VerdictOK, Stdout: "42\n"}, Pool: api.PoolUse{Hit: true}})
	}, Options{})
	res, err := c.Run(ctx(t), &api.RunRequest{Code: &code, Limits: api.Limits{"memory": "64M"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != api.VerdictOK || res.Stdout != "42\n" || !res.Pool.Hit {
		t.Fatalf("result %+v", res)
	}
	if got.Code == nil || *got.Code != code || got.Limits["memory"] != "64M" {
		t.Fatalf("the server got %+v", got)
	}
}

// A run whose jail could not be set up is answered 500 with its result:
// the run's outcome, not a refusal. A 500 without a verdict is an error.
func TestRunTakesA500WithAVerdictAsTheResult(t *testing.T) {
	msg := "set up: no cgroup"
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("x") == "" {
			writeJSON(w, 500, api.RunResponse{Result: &api.Result{Verdict: api.VerdictError, Error: &msg}})
		}
	}, Options{})
	res, err := c.Run(ctx(t), &api.RunRequest{Argv: []string{"true"}})
	if err != nil || res.Verdict != api.VerdictError || res.Error == nil || *res.Error != msg {
		t.Fatalf("%+v, %v", res, err)
	}
	c2 := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 500, api.Error{Msg: "the server failed"})
	}, Options{})
	if _, err := c2.Run(ctx(t), &api.RunRequest{Argv: []string{"true"}}); err == nil {
		t.Fatal("a 500 without a verdict was taken as a result")
	}
}

// A refusal is an *Error with the status and the server's reason.
func TestRefusalIsTypedWithStatusAndBody(t *testing.T) {
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 422, api.Error{Msg: "limits.memory: 9G is above the profile's 1G"})
	}, Options{})
	_, err := c.CreateSession(ctx(t), &api.SessionRequest{Limits: api.Limits{"memory": "9G"}})
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%T %v, want *Error", err, err)
	}
	if e.Status != 422 || e.Body.Msg != "limits.memory: 9G is above the profile's 1G" || e.Method != "POST" || e.Target != "/v1/sessions" {
		t.Fatalf("%+v", e)
	}
	if !strings.Contains(e.Error(), "422") || !strings.Contains(e.Error(), "9G is above") {
		t.Fatalf("%q", e.Error())
	}
}

// A streamed run hands each output line to its writer as it comes, and
// returns the result line.
func TestRunStreamHandsOutputOnAndReturnsTheResult(t *testing.T) {
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != api.NDJSON {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", api.NDJSON)
		enc := json.NewEncoder(w)
		enc.Encode(api.StreamLine{Type: api.StreamStdout, Data: "a\n"})
		enc.Encode(api.StreamLine{Type: api.StreamStderr, Data: "warn\n"})
		w.Write([]byte("\n"))
		enc.Encode(api.StreamLine{Type: api.StreamStdout, Data: "b\n"})
		enc.Encode(api.RunResponse{Type: api.StreamResult, Result: &api.Result{Verdict: api.VerdictExit, ExitCode: 3, Stdout: "a\nb\n"}})
	}, Options{})
	var out, errw bytes.Buffer
	res, err := c.RunStream(ctx(t), &api.RunRequest{Argv: []string{"x"}}, Output{Stdout: &out, Stderr: &errw})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "a\nb\n" || errw.String() != "warn\n" || res.ExitCode != 3 || res.Type != api.StreamResult {
		t.Fatalf("stdout %q stderr %q result %+v", out.String(), errw.String(), res)
	}
}

// A server that answers a streamed run whole (a gateway in front of a
// cluster streams nothing) still has its output handed to the writers,
// once, and the result returned.
func TestRunStreamAnsweredWholeHandsTheOutputOn(t *testing.T) {
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(api.RunResponse{Result: &api.Result{Verdict: api.VerdictExit, ExitCode: 3, Stdout: "a\nb\n", Stderr: "warn\n"}})
	}, Options{})
	var out, errw bytes.Buffer
	res, err := c.RunStream(ctx(t), &api.RunRequest{Argv: []string{"x"}}, Output{Stdout: &out, Stderr: &errw})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "a\nb\n" || errw.String() != "warn\n" || res.ExitCode != 3 {
		t.Fatalf("stdout %q stderr %q result %+v", out.String(), errw.String(), res)
	}
}

func TestStreamWithoutAResultIsAnError(t *testing.T) {
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.NDJSON)
		json.NewEncoder(w).Encode(api.StreamLine{Type: api.StreamStdout, Data: "a"})
	}, Options{})
	_, err := c.ExecStream(ctx(t), "s-1", &api.ExecRequest{}, Output{})
	if err == nil || !strings.Contains(err.Error(), "without a result") {
		t.Fatalf("%v", err)
	}
}

// TestAttackAnswerLargerThanTheBound: a server (or whatever answers on
// its address) that sends more than the client's bound, as a declared
// length, as a chunked body or as one stream line without end, is
// refused after at most the bound is read; the client never holds more.
func TestAttackAnswerLargerThanTheBound(t *testing.T) {
	const max = 1 << 16
	big := strings.Repeat("x", 4*max)
	cases := map[string]http.HandlerFunc{
		"content-length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(big)+2))
			fmt.Fprintf(w, "%q", big)
		},
		"chunked": func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"verdict":"ok","stdout":"`))
			for i := 0; i < 8; i++ {
				w.Write([]byte(big))
				w.(http.Flusher).Flush()
			}
		},
		"stream line": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", api.NDJSON)
			w.Write([]byte(`{"type":"stdout","data":"`))
			for i := 0; i < 8; i++ {
				w.Write([]byte(big))
				w.(http.Flusher).Flush()
			}
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			c := unixClient(t, h, Options{MaxAnswer: max})
			_, err := c.RunStream(ctx(t), &api.RunRequest{Argv: []string{"x"}}, Output{})
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%v, want ErrTooLarge", err)
			}
		})
	}
	// At the bound exactly, an answer is read.
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		body := `{"verdict":"ok","stdout":"` + strings.Repeat("y", max-len(`{"verdict":"ok","stdout":""}`)) + `"}`
		w.Write([]byte(body))
	}, Options{MaxAnswer: max})
	if res, err := c.Run(ctx(t), &api.RunRequest{Argv: []string{"x"}}); err != nil || len(res.Stdout) != max-len(`{"verdict":"ok","stdout":""}`) {
		t.Fatalf("an answer of the bound's size: %v", err)
	}
}

// ReadFile's max refuses a larger file rather than cutting it.
func TestReadFileBoundAndPaths(t *testing.T) {
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.EscapedPath() {
		case "/v1/sessions/s%201/files/d/a%3Fb.txt":
			w.Write([]byte("0123456789"))
		default:
			writeJSON(w, 404, api.Error{Msg: "no such file: " + r.URL.EscapedPath()})
		}
	}, Options{})
	b, err := c.ReadFile(ctx(t), "s 1", "d/a?b.txt", 10)
	if err != nil || string(b) != "0123456789" {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := c.ReadFile(ctx(t), "s 1", "d/a?b.txt", 9); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 10-byte file read with max 9: %v", err)
	}
	var e *Error
	if _, err := c.ReadFile(ctx(t), "s 1", "nope", 0); !errors.As(err, &e) || e.Status != 404 {
		t.Fatalf("%v", err)
	}
	// OpenFile gives the bytes unread, with their number, to a caller
	// that bounds its read itself (MCP's download_file).
	f, size, err := c.OpenFile(ctx(t), "s 1", "d/a?b.txt")
	if err != nil || size != 10 {
		t.Fatalf("OpenFile: size %d, %v", size, err)
	}
	b, err = io.ReadAll(io.LimitReader(f, 4))
	f.Close()
	if err != nil || string(b) != "0123" {
		t.Errorf("OpenFile's first 4 bytes: %q %v", b, err)
	}
	if _, _, err := c.OpenFile(ctx(t), "s 1", "nope"); !errors.As(err, &e) || e.Status != 404 || !strings.Contains(e.Body.Msg, "no such file") {
		t.Errorf("OpenFile of a missing file: %v", err)
	}
}

// Each session route is the method and path the server serves, and its
// answer decodes into its type.
func TestSessionRoutes(t *testing.T) {
	type seen struct{ method, path, query, body string }
	var got []seen
	c := unixClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(b)})
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/sessions":
			writeJSON(w, 201, api.SessionCreated{SessionID: "s-1"})
		case r.URL.Path == "/v1/sessions":
			writeJSON(w, 200, api.SessionList{Sessions: []api.SessionInfo{{SessionID: "s-1"}, {SessionID: "s-2"}}})
		case strings.HasSuffix(r.URL.Path, "/exec"):
			writeJSON(w, 200, api.ExecResult{Verdict: api.ExecException, Error: &api.ExecError{Name: "ValueError"}})
		case strings.HasSuffix(r.URL.Path, "/interrupt"):
			writeJSON(w, 202, api.Interrupting{Status: "interrupting"})
		case strings.HasSuffix(r.URL.Path, "/ttl"), r.Method == "GET" && r.URL.Path == "/v1/sessions/s-1":
			writeJSON(w, 200, api.SessionInfo{SessionID: "s-1", Alive: true})
		case strings.HasSuffix(r.URL.Path, "/restart"):
			writeJSON(w, 200, api.RestartResult{SessionID: "s-1", Restarted: true, State: "fresh"})
		case r.Method == "DELETE" && r.URL.Path == "/v1/sessions/s-1":
			writeJSON(w, 200, api.SessionEnd{SessionID: "s-1", Verdict: api.SessionClosed})
		case r.Method == "PUT":
			writeJSON(w, 201, api.FileWritten{Path: "d/a", Bytes: int64(len(b))})
		case r.Method == "DELETE":
			writeJSON(w, 200, api.FileDeleted{Deleted: "d/a"})
		case r.URL.Path == "/v1/sessions/s-1/files":
			writeJSON(w, 200, api.FileList{Path: "d", Entries: []api.FileEntry{{Name: "a", Type: "file", Size: 3}}})
		case r.URL.Path == "/v1/health":
			writeJSON(w, 200, api.Health{Status: "ok"})
		default:
			writeJSON(w, 404, api.Error{Msg: "?"})
		}
	}, Options{})
	cx := ctx(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	created, err := c.CreateSession(cx, &api.SessionRequest{TTL: "1h"})
	must(err)
	list, err := c.Sessions(cx)
	must(err)
	code := "1/0"
	res, err := c.Exec(cx, created.SessionID, &api.ExecRequest{Code: &code})
	must(err)
	must(c.Interrupt(cx, "s-1"))
	info, err := c.SetTTL(cx, "s-1", "30m")
	must(err)
	rr, err := c.Restart(cx, "s-1")
	must(err)
	info2, err := c.Session(cx, "s-1")
	must(err)
	fw, err := c.WriteFile(cx, "s-1", "d/a", strings.NewReader("abc"))
	must(err)
	fl, err := c.ListFiles(cx, "s-1", "d")
	must(err)
	must(c.DeleteFile(cx, "s-1", "d/a"))
	end, err := c.EndSession(cx, "s-1")
	must(err)
	h, err := c.Health(cx)
	must(err)
	if created.SessionID != "s-1" || len(list) != 2 || res.Verdict != api.ExecException || res.Error.Name != "ValueError" ||
		!info.Alive || !rr.Restarted || info2.SessionID != "s-1" || fw.Bytes != 3 || len(fl.Entries) != 1 ||
		end.Verdict != api.SessionClosed || h.Status != "ok" {
		t.Fatalf("answers: %+v %+v %+v %+v %+v %+v %+v %+v %+v %+v", created, list, res, info, rr, info2, fw, fl, end, h)
	}
	want := []seen{
		{"POST", "/v1/sessions", "", `{"ttl":"1h"}`},
		{"GET", "/v1/sessions", "", ""},
		{"POST", "/v1/sessions/s-1/exec", "", `{"code":"1/0"}`},
		{"POST", "/v1/sessions/s-1/interrupt", "", ""},
		{"POST", "/v1/sessions/s-1/ttl", "", `{"ttl":"30m"}`},
		{"POST", "/v1/sessions/s-1/restart", "", ""},
		{"GET", "/v1/sessions/s-1", "", ""},
		{"PUT", "/v1/sessions/s-1/files/d/a", "", "abc"},
		{"GET", "/v1/sessions/s-1/files", "path=d", ""},
		{"DELETE", "/v1/sessions/s-1/files/d/a", "", ""},
		{"DELETE", "/v1/sessions/s-1", "", ""},
		{"GET", "/v1/health", "", ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("requests:\n%v\nwant:\n%v", got, want)
	}
}

// testCA makes a CA and a certificate it signed for 127.0.0.1, written
// as PEM files in dir; usage says what the leaf is for.
func testCA(t *testing.T, dir, name string, usage x509.ExtKeyUsage) (caFile, certFile, keyFile string, pool *x509.CertPool, leaf tls.Certificate) {
	t.Helper()
	ca := certtest.NewCA(t, name+" CA")
	l := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage}})
	return certtest.WriteFile(t, dir, name+"-ca.pem", ca.PEM, 0o600), certtest.WriteFile(t, dir, name+".pem", l.CertPEM, 0o600),
		certtest.WriteFile(t, dir, name+"-key.pem", l.KeyPEM, 0o600), ca.Pool(), l.TLS
}

// tlsGateway is an HTTPS server that wants token and, with clients set, a
// client certificate signed by that pool, as the gateway will.
func tlsGateway(t *testing.T, token string, clients *x509.CertPool, h http.HandlerFunc) (url, caFile string) {
	dir := t.TempDir()
	caFile, _, _, _, leaf := testCA(t, dir, "gateway", x509.ExtKeyUsageServerAuth)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			writeJSON(w, 401, api.Error{Msg: "a bearer token is needed"})
			return
		}
		h(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	if clients != nil {
		srv.TLS.ClientAuth, srv.TLS.ClientCAs = tls.RequireAndVerifyClientCert, clients
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, caFile
}

func healthy(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, api.Health{Status: "ok"}) }

func TestHTTPSWithBearerToken(t *testing.T) {
	url, caFile := tlsGateway(t, "s3cret", nil, healthy)
	c, err := New(url, Options{Token: "s3cret", CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := c.Health(ctx(t)); err != nil || h.Status != "ok" {
		t.Fatalf("%+v %v", h, err)
	}
	// A wrong token is the gateway's 401, typed.
	c, _ = New(url, Options{Token: "guess", CAFile: caFile})
	var e *Error
	if _, err := c.Health(ctx(t)); !errors.As(err, &e) || e.Status != 401 || e.Body.Msg != "a bearer token is needed" {
		t.Fatalf("%v", err)
	}
	// Without the CA the gateway's certificate is not trusted: nothing is
	// sent.
	c, _ = New(url, Options{Token: "s3cret"})
	if _, err := c.Health(ctx(t)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an untrusted certificate: %v", err)
	}
}

func TestHTTPSWithClientCertificate(t *testing.T) {
	dir := t.TempDir()
	_, certFile, keyFile, clients, _ := testCA(t, dir, "client", x509.ExtKeyUsageClientAuth)
	url, caFile := tlsGateway(t, "tok", clients, healthy)
	c, err := New(url, Options{Token: "tok", CAFile: caFile, CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(ctx(t)); err != nil {
		t.Fatal(err)
	}
	c, _ = New(url, Options{Token: "tok", CAFile: caFile})
	if _, err := c.Health(ctx(t)); err == nil {
		t.Fatal("a gateway that requires a client certificate answered without one")
	}
}

// TestAttackRedirectCarriesTheToken: an answer that redirects is not
// followed, so the token never goes where the answer points.
func TestAttackRedirectCarriesTheToken(t *testing.T) {
	leaked := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked <- r.Header.Get("Authorization")
	}))
	defer other.Close()
	url, caFile := tlsGateway(t, "s3cret", nil, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/health", http.StatusTemporaryRedirect)
	})
	c, err := New(url, Options{Token: "s3cret", CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := c.Health(ctx(t)); !errors.As(err, &e) || e.Status != 307 {
		t.Fatalf("%v, want the 307 as a refusal", err)
	}
	select {
	case h := <-leaked:
		t.Fatalf("the redirect was followed, with Authorization %q", h)
	default:
	}
}

func TestNewRefusesWhatItCannotReachSafely(t *testing.T) {
	for _, s := range []string{"http://example.com:80", "https://", "https://h:1/path", "https://user:pw@h:1", "ftp://h", ""} {
		if _, err := New(s, Options{}); err == nil {
			t.Errorf("New(%q) accepted", s)
		}
	}
	if _, err := New("/run/s.sock", Options{CAFile: "ca.pem"}); err == nil {
		t.Error("a unix socket took a CA file")
	}
	if _, err := New("https://h:1", Options{Token: "a\r\nX-Evil: 1"}); err == nil {
		t.Error("a token with a line break accepted")
	}
	if _, err := New("https://h:1", Options{CertFile: "c.pem"}); err == nil {
		t.Error("a certificate without its key accepted")
	}
	for _, s := range []string{"/run/stockade/stockade.sock", "unix:/tmp/s.sock", "s.sock"} {
		if _, err := New(s, Options{}); err != nil {
			t.Errorf("New(%q): %v", s, err)
		}
	}
}
