package mcp

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/client"
)

// Remote is the tools' backend of a server reached through the Go client:
// `stockade mcp --server SOCKET`, its own pool's private socket, and the
// gateway's own /v1/mcp (a client over the gateway's checks in process).
func Remote(c *client.Client) Backend { return remote{c} }

type remote struct{ c *client.Client }

// refusal is the client's refusal as the server's error (its status and
// reason), as the server's own operations return it in process.
func refusal(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		return &ce.Body
	}
	return err
}

// streams hands a streamed answer's output to onOutput.
func streams(onOutput OutputFunc) client.Output {
	return client.Output{Stdout: outputWriter{"stdout", onOutput}, Stderr: outputWriter{"stderr", onOutput}}
}

type outputWriter struct {
	stream   string
	onOutput OutputFunc
}

func (w outputWriter) Write(p []byte) (int, error) {
	w.onOutput(w.stream, string(p))
	return len(p), nil
}

func (r remote) Run(ctx context.Context, req *api.RunRequest, onOutput OutputFunc) (*api.RunResponse, error) {
	if onOutput == nil {
		res, err := r.c.Run(ctx, req)
		return res, refusal(err)
	}
	res, err := r.c.RunStream(ctx, req, streams(onOutput))
	return res, refusal(err)
}

func (r remote) CreateSession(ctx context.Context, req *api.SessionRequest) (*api.SessionCreated, error) {
	res, err := r.c.CreateSession(ctx, req)
	return res, refusal(err)
}

func (r remote) Exec(ctx context.Context, id string, req *api.ExecRequest, onOutput OutputFunc) (*api.ExecResult, error) {
	if onOutput == nil {
		res, err := r.c.Exec(ctx, id, req)
		return res, refusal(err)
	}
	res, err := r.c.ExecStream(ctx, id, req, streams(onOutput))
	return res, refusal(err)
}

func (r remote) CloseSession(ctx context.Context, id string) (*api.SessionEnd, error) {
	res, err := r.c.EndSession(ctx, id)
	return res, refusal(err)
}

func (r remote) Interrupt(ctx context.Context, id string) error {
	return refusal(r.c.Interrupt(ctx, id))
}

func (r remote) OpenFile(ctx context.Context, id, path string) (io.ReadCloser, int64, error) {
	f, size, err := r.c.OpenFile(ctx, id, path)
	return f, size, refusal(err)
}

func (r remote) WriteFile(ctx context.Context, id, path string, data []byte) error {
	_, err := r.c.WriteFile(ctx, id, path, bytes.NewReader(data))
	return refusal(err)
}

func (r remote) ListFiles(ctx context.Context, id, dir string) (*api.FileList, error) {
	res, err := r.c.ListFiles(ctx, id, dir)
	return res, refusal(err)
}
