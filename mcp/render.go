package mcp

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxShown bounds each of stdout, stderr, the result and the traceback in
// the text a model reads. What a program prints past a screenful is mostly
// repetition, and the model's context pays for every byte; the beginning
// and the end (where the error is) say the most, so the middle is cut. The
// structured content keeps the whole of what the server sent.
const maxShown = 8000

// cut keeps s whole up to max bytes, else its first and last max/2 bytes
// (on UTF-8 boundaries) around a line that counts what was cut.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	h := max / 2
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	t := len(s) - max/2
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return s[:h] + fmt.Sprintf("\n[... %d bytes cut ...]\n", t-h) + s[t:]
}

// outcomeResult is a run's or exec's result as the model gets it: the text,
// one image per figure, the result object, and isError unless "ok".
func outcomeResult(o *Outcome, singleUse bool) *sdk.CallToolResult {
	var b strings.Builder
	fmt.Fprintf(&b, "verdict: %s", o.Verdict)
	if o.State != "" {
		fmt.Fprintf(&b, " (session state %s)", o.State)
	}
	b.WriteString("\n")
	if o.Why != "" {
		fmt.Fprintf(&b, "why: %s\n", o.Why)
	}
	if singleUse && o.ExitCode != nil && *o.ExitCode != 0 {
		fmt.Fprintf(&b, "exit code: %d\n", *o.ExitCode)
	}
	if e := o.SetupError(); e != "" {
		fmt.Fprintf(&b, "error: %s\n", e)
	}
	stream := func(name, s string, truncated bool) {
		if s == "" && !truncated {
			return
		}
		fmt.Fprintf(&b, "%s:\n%s", name, cut(s, maxShown))
		if !strings.HasSuffix(s, "\n") {
			b.WriteString("\n")
		}
		if truncated {
			fmt.Fprintf(&b, "[%s went past the jail's output limit; the rest was dropped]\n", name)
		}
	}
	stream("stdout", o.Stdout, o.StdoutTruncated)
	stream("stderr", o.Stderr, o.StderrTruncated)
	content := []sdk.Content{nil}
	if len(o.Results) > 0 {
		// The rich results carry the last expression's value and the
		// figures (their PNGs) in the cell's order.
		content = append(content, richText(&b, o.Results)...)
	} else if o.Result != nil {
		fmt.Fprintf(&b, "result: %s\n", cut(*o.Result, maxShown))
	}
	if e := o.Exception(); e != nil {
		if e.Traceback != "" {
			stream("traceback", e.Traceback, false)
		} else {
			fmt.Fprintf(&b, "exception: %s: %s\n", e.Name, cut(e.Value, maxShown))
		}
	}
	for i, img := range o.Images {
		if len(o.Results) > 0 {
			break // the figures are among the results
		}
		data, err := decodeBase64(img.Data)
		if err != nil {
			fmt.Fprintf(&b, "figure %d: not base64 (%v)\n", i+1, err)
			continue
		}
		content = append(content, &sdk.ImageContent{Data: data, MIMEType: "image/" + img.Type})
	}
	if n := len(content) - 1; n > 0 {
		fmt.Fprintf(&b, "figures: %d, as images after this text\n", n)
	}
	changed := o.FilesChanged
	if singleUse {
		changed = runFiles(o.Raw)
	}
	if len(changed) > 0 {
		fmt.Fprintf(&b, "files changed in /work: %s\n", cut(strings.Join(changed, ", "), maxShown))
		if singleUse {
			b.WriteString("(a single-use jail's /work is gone after the run: use a session to keep files and read them with download_file)\n")
		}
	}
	content[0] = &sdk.TextContent{Text: b.String()}
	return &sdk.CallToolResult{Content: content, StructuredContent: structured(o.Raw, singleUse), IsError: o.Verdict != "ok"}
}

// richText writes each rich result as the model reads it, its text/plain
// ("result:" for the last expression's, "display:" for the others) and
// the other types it has, and returns an image for each PNG or JPEG.
func richText(b *strings.Builder, results []RichResult) []sdk.Content {
	var images []sdk.Content
	for _, r := range results {
		label := "display"
		if r.IsMainResult {
			label = "result"
		}
		fmt.Fprintf(b, "%s: %s\n", label, cut(r.text("text/plain"), maxShown))
		var also []string
		for mime, raw := range r.Data {
			switch mime {
			case "text/plain":
			case "image/png", "image/jpeg":
				var s string
				if json.Unmarshal(raw, &s) != nil {
					continue
				}
				data, err := decodeBase64(s)
				if err != nil {
					fmt.Fprintf(b, "[%s: not base64 (%v)]\n", mime, err)
					continue
				}
				images = append(images, &sdk.ImageContent{Data: data, MIMEType: mime})
			default:
				also = append(also, mime)
			}
		}
		if len(also) > 0 {
			sort.Strings(also)
			fmt.Fprintf(b, "[also as %s, in the structured content]\n", strings.Join(also, ", "))
		}
		if r.Truncated {
			b.WriteString("[this result was cut to fit the server's caps]\n")
		}
	}
	return images
}

// runFiles are the names of the files a single-use run returned.
func runFiles(raw map[string]any) []string {
	files, _ := raw["files"].(map[string]any)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// structured is the result object without the bytes the content carries
// already: each image's data (an ImageContent each) and a single-use
// run's files (named in files_changed; their bytes would fill the
// model's context).
func structured(raw map[string]any, singleUse bool) map[string]any {
	out := make(map[string]any, len(raw))
	for k, v := range raw {
		out[k] = v
	}
	if imgs, ok := raw["images"].([]any); ok {
		stripped := make([]any, 0, len(imgs))
		for _, img := range imgs {
			m, _ := img.(map[string]any)
			data, _ := m["data"].(string)
			n := len(data) / 4 * 3
			n -= len(data) - len(strings.TrimRight(data, "="))
			stripped = append(stripped, map[string]any{"type": m["type"], "bytes": n})
		}
		out["images"] = stripped
	}
	if results, ok := raw["results"].([]any); ok {
		out["results"] = stripImages(results)
	}
	if singleUse {
		delete(out, "files")
		out["files_changed"] = runFiles(raw)
	}
	delete(out, "type")
	return out
}

// stripImages is the rich results without the images' base64 (each is an
// image content already): each image type's value leaves data and its
// size in bytes goes in "omitted".
func stripImages(results []any) []any {
	out := make([]any, 0, len(results))
	for _, r := range results {
		m, _ := r.(map[string]any)
		data, _ := m["data"].(map[string]any)
		copied := make(map[string]any, len(m))
		for k, v := range m {
			copied[k] = v
		}
		kept := make(map[string]any, len(data))
		omitted := map[string]any{}
		for mime, v := range data {
			if s, ok := v.(string); ok && (mime == "image/png" || mime == "image/jpeg") {
				n := len(s) / 4 * 3
				n -= len(s) - len(strings.TrimRight(s, "="))
				omitted[mime] = n
				continue
			}
			kept[mime] = v
		}
		copied["data"] = kept
		if len(omitted) > 0 {
			copied["omitted"] = omitted
		}
		out = append(out, copied)
	}
	return out
}

// listingText shows GET .../files as one line per entry.
func listingText(m map[string]any) string {
	var b strings.Builder
	dir := "/work"
	if p, _ := m["path"].(string); p != "" && p != "." {
		dir += "/" + p
	}
	fmt.Fprintf(&b, "%s:\n", dir)
	entries, _ := m["entries"].([]any)
	for _, e := range entries {
		em, _ := e.(map[string]any)
		fmt.Fprintf(&b, "%v\t%s\t%v\n", em["type"], number(em["size"]), em["name"])
	}
	if len(entries) == 0 {
		b.WriteString("(empty)\n")
	}
	if t, _ := m["truncated"].(bool); t {
		b.WriteString("[more entries not listed]\n")
	}
	return b.String()
}

// number shows a JSON number as a person writes it: 7667712, not
// 7.667712e+06, which is how %v prints the float64 JSON decodes into.
func number(v any) string {
	f, ok := v.(float64)
	if !ok {
		return fmt.Sprint(v)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
