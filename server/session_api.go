package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/profiles"
)

// decodeJSON reads a session route's body: one JSON object, no unknown
// field, numbers kept as written (a limit's, for the profile decoder).
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badRequest("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return badRequest("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("malformed JSON: data after the object")
	}
	return nil
}

// maxWorkPath bounds a path in /work: its bytes and its depth.
const (
	maxWorkPath  = 4096
	maxWorkDepth = 32
)

// checkWorkPath admits a relative path below /work: clean, no "." or
// ".." component, no NUL, no component over 255 bytes. The host opens it
// beneath /work without following symlinks whatever it says; this check
// gives a clear 400 instead of a failed open.
func checkWorkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return badRequest("path %q: not a file in /work", p)
	case len(p) > maxWorkPath:
		return badRequest("path %.40q...: longer than %d bytes", p, maxWorkPath)
	case strings.IndexByte(p, 0) >= 0:
		return badRequest("path %q: contains NUL", p)
	case strings.HasPrefix(p, "/"):
		return badRequest("path %q: relative to /work, not absolute", p)
	case path.Clean(p) != p:
		return badRequest("path %q: not clean (want %q)", p, path.Clean(p))
	}
	parts := strings.Split(p, "/")
	if len(parts) > maxWorkDepth {
		return badRequest("path %q: deeper than %d", p, maxWorkDepth)
	}
	for _, c := range parts {
		if c == ".." {
			return badRequest("path %q: \"..\" leaves /work", p)
		}
		if len(c) > 255 {
			return badRequest("path %q: a name longer than 255 bytes", p)
		}
		if c == figureDir && len(parts) == 1 {
			return badRequest("path %q: reserved", p)
		}
	}
	return nil
}

// checkFiles checks a request's files (path -> base64).
func checkFiles(files map[string]string, max int) error {
	if len(files) > max {
		return badRequest("files: %d files, at most %d", len(files), max)
	}
	for name, data := range files {
		if err := checkWorkPath(name); err != nil {
			return badRequest("files: %s", err.(*api.Error).Msg)
		}
		if _, err := base64.StdEncoding.DecodeString(data); err != nil {
			return badRequest("files[%q]: not base64: %v", name, err)
		}
	}
	return nil
}

// checkFigureFormats admits "png" and "svg", each once.
func checkFigureFormats(formats []string) error {
	seen := map[string]bool{}
	for _, f := range formats {
		if f != "png" && f != "svg" || seen[f] {
			return badRequest("figure_formats: %q: want \"png\", \"svg\" or both, each once", f)
		}
		seen[f] = true
	}
	return nil
}

// checkEnv checks a session's environment: names a shell could export,
// at most maxExecEnvVars of them and maxExecEnvBytes of names and values,
// as an exec's. The server holds it for the session's whole life (each
// restart starts the interpreter with it again), so without a bound a
// caller could make the server hold --max-body per session.
func checkEnv(env map[string]string) error {
	if len(env) > maxExecEnvVars {
		return badRequest("env: %d variables, at most %d", len(env), maxExecEnvVars)
	}
	total := 0
	for k, v := range env {
		total += len(k) + len(v)
		if k == "" || len(k) > maxEnvName || strings.ContainsAny(k, "=\x00") {
			return badRequest("env: name %.40q: want a name without '=' or NUL, at most %d bytes", k, maxEnvName)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return badRequest("env[%q]: value contains NUL", k)
		}
	}
	if total > maxExecEnvBytes {
		return badRequest("env: %d bytes of names and values, at most %d", total, maxExecEnvBytes)
	}
	return nil
}

// sessionDuration reads a session's idle timeout or lifetime: at most the
// server's ceiling (422 above it), the ceiling when not given.
func sessionDuration(field, v string, ceiling time.Duration) (time.Duration, error) {
	if v == "" {
		return ceiling, nil
	}
	d, err := profiles.ParseDuration(v)
	if err != nil {
		return 0, badRequest("%s: %v", field, err)
	}
	if d <= 0 {
		return 0, badRequest("%s: %q must be positive", field, v)
	}
	if d > ceiling {
		return 0, &api.Error{Status: 422, Msg: fmt.Sprintf("%s: %v is above the server's ceiling of %v (--session-%s)", field, d, ceiling, map[string]string{"idle_timeout": "idle", "ttl": "ttl"}[field])}
	}
	return d, nil
}

// execTimeout reads an exec's timeout: at most the session's.
func execTimeout(v string, ceiling time.Duration) (time.Duration, error) {
	if v == "" {
		return ceiling, nil
	}
	d, err := profiles.ParseDuration(v)
	if err != nil {
		return 0, badRequest("timeout: %v", err)
	}
	if d <= 0 {
		return 0, badRequest("timeout: %q must be positive", v)
	}
	if d > ceiling {
		return 0, &api.Error{Status: 422, Msg: fmt.Sprintf("timeout: %v is above the session's ceiling of %v", d, ceiling)}
	}
	return d, nil
}

// The bounds of an exec's env: a handful of settings and secrets for one
// cell, not a second way to ship data (files and stdin are that).
const (
	maxExecEnvVars  = 64
	maxExecEnvBytes = 32 << 10 // names and values, together
	maxEnvName      = 128
)

// reservedEnv are the names an exec's env may not set, each with the
// reason: what stockade or the jail relies on. A pattern ending in '*' is
// a prefix, one starting with '*' a suffix, any other the whole name. The
// cell can set any of them itself (os.environ); refusing them here keeps
// a caller's setting from changing, in silence, how every program the
// cell starts is loaded, what code it runs first and whom it trusts.
var reservedEnv = []struct{ pattern, why string }{
	{"LD_*", "the dynamic loader's: it would load code into every program the cell starts"},
	{"PYTHON*", "the start-up of every Python the cell starts (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME); the session's interpreter is already running"},
	{"HTTP_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"HTTPS_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"ALL_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"NO_PROXY*", "the jail's route to the hosts the operator allowed"},
	{"MPLCONFIGDIR", "matplotlib's font cache, which stockade builds once and binds read-only"},
	// A non-interactive bash sources $BASH_ENV, a POSIX sh started
	// interactively $ENV: a value would run its file's code before every
	// shell command the cell starts (subprocess, os.system).
	{"BASH_ENV", "bash sources that file before every bash -c the cell starts"},
	{"ENV", "sh and bash source that file at start-up"},
	// glibc reads these in every dynamically linked program: tunables
	// change its allocator and security hardening, GCONV_PATH names the
	// shared objects iconv loads.
	{"GLIBC_TUNABLES", "glibc's tunables, read by every program the cell starts"},
	{"GCONV_PATH", "where glibc's iconv loads its shared objects from: code in every program that converts a charset"},
	// OpenSSL's configuration can load engines and providers (shared
	// objects); the certificate settings choose whom TLS trusts.
	{"OPENSSL_CONF", "OpenSSL's configuration, which can load engines (code) into every program using TLS"},
	{"SSL_CERT_FILE", "the certificates every TLS client in the cell trusts"},
	{"SSL_CERT_DIR", "the certificates every TLS client in the cell trusts"},
	{"*_CA_BUNDLE", "the certificates requests, curl and the like trust (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE)"},
	// Interpreters' start-up options: code run before the program.
	{"NODE_OPTIONS", "node's start-up options (--require runs a file's code first)"},
	{"PERL5OPT", "perl's start-up options (-M loads a module first)"},
}

// reserved says which reservedEnv pattern, if any, name k matches, case
// aside: the proxies, for one, are read in either case.
func reserved(k string) (pattern, why string, ok bool) {
	u := strings.ToUpper(k)
	for _, r := range reservedEnv {
		p := r.pattern
		switch {
		case strings.HasSuffix(p, "*"):
			ok = strings.HasPrefix(u, p[:len(p)-1])
		case strings.HasPrefix(p, "*"):
			ok = strings.HasSuffix(u, p[1:])
		default:
			ok = u == p
		}
		if ok {
			return p, r.why, true
		}
	}
	return "", "", false
}

// checkExecEnv checks an exec's env: at most maxExecEnvVars variables and
// maxExecEnvBytes in all, each name a portable shell name (letters,
// digits, underscore, not first a digit) and none of reservedEnv, no
// value with NUL.
func checkExecEnv(env map[string]string) error {
	if len(env) > maxExecEnvVars {
		return badRequest("env: %d variables, at most %d", len(env), maxExecEnvVars)
	}
	total := 0
	for k, v := range env {
		total += len(k) + len(v)
		if !envName(k) {
			return badRequest("env: name %.40q: want letters, digits and _ (not first a digit), at most %d bytes", k, maxEnvName)
		}
		if p, why, ok := reserved(k); ok {
			return badRequest("env: %s: an exec may not set %s: %s", k, p, why)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return badRequest("env[%q]: value contains NUL", k)
		}
	}
	if total > maxExecEnvBytes {
		return badRequest("env: %d bytes of names and values, at most %d", total, maxExecEnvBytes)
	}
	return nil
}

func envName(k string) bool {
	if k == "" || len(k) > maxEnvName || ('0' <= k[0] && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
