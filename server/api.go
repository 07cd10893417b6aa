package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stockade/stockade/api"
)

func badRequest(format string, a ...any) *api.Error {
	return &api.Error{Status: 400, Msg: fmt.Sprintf(format, a...)}
}

// runRequest is a run's request and what validating it found.
type runRequest struct {
	*api.RunRequest
	inputs map[string]inputFile // Files' sizes and hashes, once validated
}

// validate checks what the jail cannot: the shape of the request and its
// file names. Files are decoded as they stream, to check and hash them.
func (req *runRequest) validate(maxFiles int) error {
	if (req.Code == nil) == (len(req.Argv) == 0) {
		return badRequest("give exactly one of \"code\" and \"argv\"")
	}
	for i, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return badRequest("argv[%d]: contains NUL", i)
		}
	}
	if req.Argv != nil && req.Argv[0] == "" {
		return badRequest("argv[0]: empty")
	}
	if len(req.Files) > maxFiles {
		return badRequest("files: %d files, at most %d", len(req.Files), maxFiles)
	}
	req.inputs = make(map[string]inputFile, len(req.Files))
	for name, data := range req.Files {
		if err := checkFileName(name); err != nil {
			return err
		}
		in, err := digestBase64(data)
		if err != nil {
			return badRequest("files[%q]: not base64: %v", name, err)
		}
		req.inputs[name] = in
	}
	return nil
}

// checkFileName admits a plain name for a file directly in /work: no
// path separator, no "." or "..", no NUL, nothing the driver would
// resolve outside /work or onto the server's own figure directory.
func checkFileName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return badRequest("files: name %q is not a file name", name)
	case strings.ContainsAny(name, "/\x00"):
		return badRequest("files: name %q contains '/' or NUL (files go directly into /work)", name)
	case len(name) > 255:
		return badRequest("files: name %.20q...: longer than 255 bytes", name)
	case name == figureDir:
		return badRequest("files: name %q is reserved", name)
	}
	return nil
}

// marshal encodes v as the JSON encoder writes it (no HTML
// escaping: the output is for programs, and stdout may hold "<").
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return b.Bytes()
}

// figureDir is where in /work the driver leaves a run's figures and rich
// results (kernel.Run.FigureDir); the server returns them as images and
// results and leaves the directory out of files.
const figureDir = ".stockade-figures"
