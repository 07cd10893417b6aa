package mcp

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stockade/stockade/api"
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

// shown is what the text of a run's or an exec's result shows, taken
// from either answer.
type shown struct {
	verdict, state, why  string
	exitCode             int    // a single-use run's
	setupError           string // a single-use run's jail that could not be set up
	stdout, stderr       string
	stdoutCut, stderrCut bool
	result               *string // an exec's last expression
	exception            *api.ExecError
	results              []api.RichResult
	images               []api.Image
	changed              []string
	singleUse            bool
}

// runResult is a single-use run's result as the model gets it.
func runResult(r *api.RunResponse) *sdk.CallToolResult {
	sh := shown{singleUse: true, images: r.Images, results: r.Results, changed: fileNames(r.Files)}
	if r.Result != nil {
		sh.verdict, sh.exitCode = string(r.Verdict), r.ExitCode
		sh.stdout, sh.stderr, sh.stdoutCut, sh.stderrCut = r.Stdout, r.Stderr, r.StdoutTruncated, r.StderrTruncated
		if r.Error != nil {
			sh.setupError = *r.Error
		}
	}
	return sh.toolResult()
}

// execResult is a session exec's result as the model gets it.
func execResult(r *api.ExecResult) *sdk.CallToolResult {
	return shown{verdict: string(r.Verdict), state: r.State, why: r.Why, stdout: r.Stdout, stderr: r.Stderr,
		stdoutCut: r.StdoutTruncated, stderrCut: r.StderrTruncated, result: r.Result, exception: r.Error,
		results: r.Results, images: r.Images, changed: r.FilesChanged}.toolResult()
}

// toolResult is the text, one image per figure, and isError unless "ok"; the
// structured content is the tool's output (RunOutput).
func (o shown) toolResult() *sdk.CallToolResult {
	var b strings.Builder
	fmt.Fprintf(&b, "verdict: %s", o.verdict)
	if o.state != "" {
		fmt.Fprintf(&b, " (session state %s)", o.state)
	}
	b.WriteString("\n")
	if o.why != "" {
		fmt.Fprintf(&b, "why: %s\n", o.why)
	}
	if o.singleUse && o.exitCode != 0 {
		fmt.Fprintf(&b, "exit code: %d\n", o.exitCode)
	}
	if o.setupError != "" {
		fmt.Fprintf(&b, "error: %s\n", o.setupError)
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
	stream("stdout", o.stdout, o.stdoutCut)
	stream("stderr", o.stderr, o.stderrCut)
	content := []sdk.Content{nil}
	if len(o.results) > 0 {
		// The rich results carry the last expression's value and the
		// figures (their PNGs) in the cell's order.
		content = append(content, richText(&b, o.results)...)
	} else if o.result != nil {
		fmt.Fprintf(&b, "result: %s\n", cut(*o.result, maxShown))
	}
	if e := o.exception; e != nil {
		if e.Traceback != "" {
			stream("traceback", e.Traceback, false)
		} else {
			fmt.Fprintf(&b, "exception: %s: %s\n", e.Name, cut(e.Value, maxShown))
		}
	}
	for i, img := range o.images {
		if len(o.results) > 0 {
			break // the figures are among the results
		}
		data, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil {
			fmt.Fprintf(&b, "figure %d: not base64 (%v)\n", i+1, err)
			continue
		}
		content = append(content, &sdk.ImageContent{Data: data, MIMEType: "image/" + img.Type})
	}
	if n := len(content) - 1; n > 0 {
		fmt.Fprintf(&b, "figures: %d, as images after this text\n", n)
	}
	if len(o.changed) > 0 {
		fmt.Fprintf(&b, "files changed in /work: %s\n", cut(strings.Join(o.changed, ", "), maxShown))
		if o.singleUse {
			b.WriteString("(a single-use jail's /work is gone after the run: use a session to keep files and read them with download_file)\n")
		}
	}
	content[0] = &sdk.TextContent{Text: b.String()}
	return &sdk.CallToolResult{Content: content, IsError: o.verdict != "ok"}
}

// richText writes each rich result as the model reads it, its text/plain
// ("result:" for the last expression's, "display:" for the others) and
// the other types it has, and returns an image for each PNG or JPEG.
func richText(b *strings.Builder, results []api.RichResult) []sdk.Content {
	var images []sdk.Content
	for _, r := range results {
		label := "display"
		if r.IsMainResult {
			label = "result"
		}
		var text string
		_ = json.Unmarshal(r.Data["text/plain"], &text)
		fmt.Fprintf(b, "%s: %s\n", label, cut(text, maxShown))
		var also []string
		for mime, raw := range r.Data {
			switch {
			case mime == "text/plain":
			case imageTypes[mime]:
				var s string
				if json.Unmarshal(raw, &s) != nil {
					continue
				}
				data, err := base64.StdEncoding.DecodeString(s)
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

// listingText shows a directory's listing as one line per entry.
func listingText(l *api.FileList) string {
	var b strings.Builder
	dir := "/work"
	if l.Path != "" && l.Path != "." {
		dir += "/" + l.Path
	}
	fmt.Fprintf(&b, "%s:\n", dir)
	for _, e := range l.Entries {
		fmt.Fprintf(&b, "%s\t%d\t%s\n", e.Type, e.Size, e.Name)
	}
	if len(l.Entries) == 0 {
		b.WriteString("(empty)\n")
	}
	if l.Truncated {
		b.WriteString("[more entries not listed]\n")
	}
	return b.String()
}
