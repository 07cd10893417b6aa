package mcp

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stockade/stockade/api"
)

// Each tool's structured content is a typed value: the API's own type
// where the tool returns what the server answered (create_session,
// close_session, list_files), else a view of it. Their schemas are
// derived from these types (outputSchema), so that a client is told the
// shape of what comes back and the SDK checks every answer against it.

// RunOutput is run_python's structured content: a single-use run's result
// or a session exec's, inline, as the server sent it, less the bytes the
// content carries already.
type RunOutput struct {
	Run  *RunView  // a single-use run's
	Exec *ExecView // a session exec's
}

// MarshalJSON writes the one of the two that is set.
func (o *RunOutput) MarshalJSON() ([]byte, error) {
	if o.Exec != nil {
		return json.Marshal(o.Exec)
	}
	return json.Marshal(o.Run)
}

// RunView is a single-use run's result without its files' bytes (named in
// files_changed: they would fill the model's context) and its images'
// (each an image content already).
type RunView struct {
	*api.RunResponse
	// Files hides the answer's files: always empty, so never written.
	Files        struct{}     `json:"files,omitzero"`
	FilesChanged []string     `json:"files_changed" jsonschema:"the files the run created or changed in /work (gone with its jail)"`
	Images       []ImageRef   `json:"images"`
	Results      []ResultView `json:"results"`
}

// ExecView is a session exec's result without its images' bytes.
type ExecView struct {
	*api.ExecResult
	Images  []ImageRef   `json:"images"`
	Results []ResultView `json:"results"`
}

// ImageRef is a figure whose bytes are an image content of the result.
type ImageRef struct {
	Type  string `json:"type"`
	Bytes int    `json:"bytes"`
}

// ResultView is a rich result whose images (PNG, JPEG) are image contents
// of the result: their types leave data, and their sizes go in omitted.
type ResultView struct {
	api.RichResult
	Data    map[string]json.RawMessage `json:"data"`
	Omitted map[string]int             `json:"omitted,omitempty" jsonschema:"image type -> bytes, for each image given as an image content"`
}

// runView is a single-use run's structured content.
func runView(r *api.RunResponse) *RunView {
	resp := *r
	resp.Type = "" // a stream's last line: the same object as unstreamed
	return &RunView{RunResponse: &resp, FilesChanged: fileNames(r.Files), Images: imageRefs(r.Images), Results: resultViews(r.Results)}
}

// execView is a session exec's structured content.
func execView(r *api.ExecResult) *ExecView {
	res := *r
	res.Type = ""
	return &ExecView{ExecResult: &res, Images: imageRefs(r.Images), Results: resultViews(r.Results)}
}

// fileNames are the names of the files a single-use run returned.
func fileNames(files api.FileMap) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// base64Len is the length of the bytes s encodes.
func base64Len(s string) int {
	return len(s)/4*3 - (len(s) - len(strings.TrimRight(s, "=")))
}

func imageRefs(images []api.Image) []ImageRef {
	refs := make([]ImageRef, 0, len(images))
	for _, img := range images {
		refs = append(refs, ImageRef{Type: img.Type, Bytes: base64Len(img.Data)})
	}
	return refs
}

// imageTypes are the rich results' types that are given as images.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true}

func resultViews(results []api.RichResult) []ResultView {
	views := make([]ResultView, 0, len(results))
	for _, r := range results {
		v := ResultView{RichResult: r, Data: make(map[string]json.RawMessage, len(r.Data))}
		for mime, raw := range r.Data {
			var s string
			if imageTypes[mime] && json.Unmarshal(raw, &s) == nil {
				if v.Omitted == nil {
					v.Omitted = map[string]int{}
				}
				v.Omitted[mime] = base64Len(s)
				continue
			}
			v.Data[mime] = raw
		}
		views = append(views, v)
	}
	return views
}

// InterruptOutput is interrupt's structured content.
type InterruptOutput struct {
	SessionID string `json:"session_id"`
	Status    string `json:"status" jsonschema:"interrupting"`
}

// UploadOutput is upload_file's structured content.
type UploadOutput struct {
	Path  string `json:"path" jsonschema:"the file's path in /work"`
	Bytes int    `json:"bytes"`
}

// DownloadOutput is download_file's structured content; the file is its
// content.
type DownloadOutput struct {
	Path     string `json:"path"`
	Bytes    int    `json:"bytes"`
	Encoding string `json:"encoding" jsonschema:"how the content gives the file: text, image or base64"`
	MIMEType string `json:"mime_type,omitempty"`
}

// outputSchema derives T's schema. A json.RawMessage (a rich result's
// value) may be any JSON.
func outputSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {},
	}})
	if err != nil {
		panic("mcp: the schema of " + reflect.TypeFor[T]().String() + ": " + err.Error())
	}
	return s
}

// schemas are the tools' output schemas, derived once: the SDK keeps
// what it resolves of each by its pointer (Options.SchemaCache).
var schemas = sync.OnceValue(func() map[string]*jsonschema.Schema {
	return map[string]*jsonschema.Schema{
		// One of the two views, which share no shape: a single-use run
		// has exit_code and files_changed, an exec state and
		// execution_count.
		"run_python":     {Type: "object", AnyOf: []*jsonschema.Schema{outputSchema[RunView](), outputSchema[ExecView]()}},
		"interrupt":      outputSchema[InterruptOutput](),
		"create_session": outputSchema[api.SessionCreated](),
		"close_session":  outputSchema[api.SessionEnd](),
		"upload_file":    outputSchema[UploadOutput](),
		"download_file":  outputSchema[DownloadOutput](),
		"list_files":     outputSchema[api.FileList](),
	}
})
