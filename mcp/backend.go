package mcp

import (
	"bytes"
	"context"
	"io"

	"github.com/stockade/stockade/api"
)

// Backend runs what the tools ask for: stockade serve's operations, with
// the API's own types in and out (package api), so that a tool sees what
// the server answered and nothing is decoded twice. The server's POST
// /v1/mcp gives the tools its operations, called in process as its
// caller; `stockade mcp` gives them a server's socket through the Go
// client (package client).
//
// A refusal is an error that is, or wraps, an *api.Error with the
// server's status.
type Backend interface {
	// Run runs code in a fresh single-use jail (POST /v1/run). A run whose
	// jail could not be set up is its result, verdict "error", not an
	// error.
	Run(ctx context.Context, req *api.RunRequest, onOutput OutputFunc) (*api.RunResponse, error)
	// CreateSession starts a session (POST /v1/sessions).
	CreateSession(ctx context.Context, req *api.SessionRequest) (*api.SessionCreated, error)
	// Exec runs code in a session (POST /v1/sessions/{id}/exec).
	Exec(ctx context.Context, sessionID string, req *api.ExecRequest, onOutput OutputFunc) (*api.ExecResult, error)
	// CloseSession ends a session and returns its final accounting.
	CloseSession(ctx context.Context, sessionID string) (*api.SessionEnd, error)
	// Interrupt raises KeyboardInterrupt in the session's running exec
	// (POST /v1/sessions/{id}/interrupt).
	Interrupt(ctx context.Context, sessionID string) error
	// OpenFile opens a file of the session's /work for reading, with its
	// size (-1: not known before it is read).
	OpenFile(ctx context.Context, sessionID, path string) (io.ReadCloser, int64, error)
	// WriteFile and ListFiles reach a session's /work.
	WriteFile(ctx context.Context, sessionID, path string, data []byte) error
	ListFiles(ctx context.Context, sessionID, dir string) (*api.FileList, error)
}

// OutputFunc, when not nil, is given a program's output as it comes
// ("stdout" or "stderr", and the text): the run is streamed. It is called
// from the goroutine that reads the output and must not block: the server
// cancels a run whose caller stops reading.
type OutputFunc = func(stream, text string)

// IsBatch says whether an MCP request body is a JSON-RPC batch. The SDK
// serves one to a client of protocol 2025-03-26 (or none) and runs each of
// its calls at once, under the one admission its HTTP request had: a front
// end that counts requests (serve's --per-caller, the gateway's session
// quota) refuses it. MCP has had no batches since 2025-06-18.
func IsBatch(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '['
}
