package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/stockade/stockade/api"
)

// Client talks to a server on its unix socket.
type Client struct {
	hc *http.Client
}

// NewClient returns a client for the server listening at socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{hc: &http.Client{Transport: tr}}
}

// Run sends req and streams the run's output to stdout and stderr as it
// comes. A refusal (4xx, 5xx without a result) is an error with the
// server's reason.
func (c *Client) Run(ctx context.Context, req *api.RunRequest, stdout, stderr io.Writer) (*api.RunResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://stockade/v1/run", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", api.NDJSON)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != api.NDJSON {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		var res api.RunResponse
		var probe struct {
			Verdict *string `json:"verdict"`
		}
		// A refusal is {"error": ...}, which would also fill Result.Error:
		// only a body with a verdict is a run's result.
		if json.Unmarshal(b, &probe) == nil && probe.Verdict != nil && json.Unmarshal(b, &res) == nil {
			return &res, nil
		}
		var e api.Error
		if json.Unmarshal(b, &e) == nil && e.Msg != "" {
			return nil, fmt.Errorf("server refused the run (%s): %s", resp.Status, e.Msg)
		}
		return nil, fmt.Errorf("server: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		var line struct {
			Type string `json:"type"`
			Data string `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("server: bad stream line: %w", err)
		}
		switch line.Type {
		case "stdout":
			io.WriteString(stdout, line.Data)
		case "stderr":
			io.WriteString(stderr, line.Data)
		case "result":
			var res api.RunResponse
			if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
				return nil, fmt.Errorf("server: bad result: %w", err)
			}
			return &res, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return nil, fmt.Errorf("server: the stream ended without a result")
}
