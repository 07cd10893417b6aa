package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stockade/stockade/api"

	"github.com/stockade/stockade/internal/beneath"
	"golang.org/x/sys/unix"
)

// collectLimits bound what a run may hand back: the jail wrote these files
// as it liked, so their number, depth and size are its choice, not ours.
type collectLimits struct {
	MaxBytes int64 // total bytes of files and images returned
	MaxFiles int
	MaxDepth int
	// Entries looked at in one walk: a jail that leaves a million empty
	// files or symlinks costs the server that many openat2 calls.
	MaxEntries int
	// files_skipped lists at most this many entries and bytes, then one
	// "N more" line: a jail's long paths would otherwise come back many
	// times over the file cap, held and sent by the server.
	MaxSkipped, MaxSkippedBytes int
	// Rich bounds the rich results the driver left (resultsFile).
	Rich richCaps
}

// collected is what the run left in /work.
type collected struct {
	files     map[string]string
	images    []api.Image
	truncated bool
	// results are the driver's rich results, held to lim.Rich.
	results          []api.RichResult
	resultsTruncated bool
	skipped          []string

	lim          collectLimits
	skippedBytes int
	notListed    int // skipped entries past the caps
}

// skip lists an entry left out, within the caps.
func (c *collected) skip(msg string) {
	if len(c.skipped) >= c.lim.MaxSkipped || c.skippedBytes+len(msg) > c.lim.MaxSkippedBytes {
		c.notListed++
		return
	}
	c.skipped = append(c.skipped, msg)
	c.skippedBytes += len(msg)
}

// finish closes the list with how many entries it does not name.
func (c *collected) finish() {
	if c.notListed > 0 {
		c.skipped = append(c.skipped, fmt.Sprintf("%d more skipped entries not listed (files_skipped keeps %d entries, %d bytes)", c.notListed, c.lim.MaxSkipped, c.lim.MaxSkippedBytes))
		c.notListed = 0
	}
}

// collectWork reads what the run created or changed in the host directory
// work (the jail is dead by now): every regular file whose bytes differ
// from what the request put there, and the figures the driver saved.
// Symlinks, FIFOs, sockets and devices are listed as skipped, never read
// or followed.
func collectWork(work string, inputs map[string]inputFile, lim collectLimits) (*collected, error) {
	// Zero caps are the defaults, never "none" (nor "nothing").
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = 10000
	}
	if lim.MaxSkipped <= 0 {
		lim.MaxSkipped = 100
	}
	if lim.MaxSkippedBytes <= 0 {
		lim.MaxSkippedBytes = 64 << 10
	}
	c := &collected{files: map[string]string{}, images: []api.Image{}, skipped: []string{}, lim: lim}
	if work == "" {
		return c, nil
	}
	root, err := unix.Open(work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", work, err)
	}
	defer unix.Close(root)
	budget := lim.MaxBytes
	var failed error
	walk := beneath.Walk{MaxEntries: lim.MaxEntries}
	walk.Failed = func(dir string, err error) beneath.Step {
		failed = err
		return beneath.Stop
	}
	walk.Cut = func(dir string) {
		c.skip(fmt.Sprintf("%s/: not all listed; a walk looks at %d entries at most", dir, lim.MaxEntries))
		c.truncated = true
	}
	walk.Visit = func(p string, depth int, e beneath.Entry) beneath.Step {
		if p == figureDir {
			return beneath.Next
		}
		switch e.Type() {
		case unix.S_IFDIR:
			if depth >= lim.MaxDepth {
				c.skip(p + "/: deeper than the limit")
				c.truncated = true
				return beneath.Next
			}
			return beneath.Descend
		case unix.S_IFREG:
			c.collectFile(root, p, inputs, &budget)
		case unix.S_IFLNK:
			c.skip(p + ": " + notOpened(unix.ELOOP))
		default:
			c.skip(p + ": not a regular file")
		}
		return beneath.Next
	}
	walk.Run(root)
	if failed != nil {
		return nil, failed
	}
	c.images, c.truncated = collectFigures(root, &budget, c)
	c.results, c.resultsTruncated = collectResults(root, c.lim.Rich)
	c.finish()
	return c, nil
}

// collectFile reads the regular file p below root into c, within the
// caps, unless it is one of the request's files unchanged.
func (c *collected) collectFile(root int, p string, inputs map[string]inputFile, budget *int64) {
	fd, st, err := beneath.OpenFile(root, p)
	if err != nil {
		c.skip(p + ": " + notOpened(err))
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		c.skip(p + ": not a regular file")
		return
	}
	// Past the count cap a file is not read (an input of its size
	// excepted, to tell it unchanged): one file linked under thousands
	// of names would be read whole under each.
	if in, ok := inputs[p]; len(c.files) >= c.lim.MaxFiles && !(ok && in.size == st.Size) {
		unix.Close(fd)
		c.skip(p + ": over the file count cap")
		c.truncated = true
		return
	}
	data, full, err := beneath.ReadCapped(fd, st.Size, *budget)
	unix.Close(fd)
	switch {
	case err != nil:
		c.skip(p + ": " + err.Error())
	case !full:
		c.skip(fmt.Sprintf("%s: %d bytes, over what is left of the %d-byte cap", p, st.Size, c.lim.MaxBytes))
		c.truncated = true
	case unchanged(inputs, p, data):
	case len(c.files) >= c.lim.MaxFiles:
		c.skip(p + ": over the file count cap")
		c.truncated = true
	default:
		*budget -= int64(len(data))
		c.files[p] = base64.StdEncoding.EncodeToString(data)
	}
}

// notOpened words why a path was not opened.
func notOpened(err error) string {
	if errors.Is(err, unix.ELOOP) {
		return "a symlink (not followed)"
	}
	return err.Error()
}

// resultsFile is where in figureDir the driver leaves a run's rich
// results: {"results": [...], "truncated": bool}.
const resultsFile = "results.json"

// collectResults reads the rich results the driver left, as the
// program could have written them too (it owns /work): a regular file of
// at most the caps' bytes and room for the list's own keys, strict JSON,
// held to the caps by answerResults as it is decoded. Anything else is no
// results, and says so when the file was there.
func collectResults(root int, caps richCaps) ([]api.RichResult, bool) {
	fd, st, err := beneath.OpenFile(root, figureDir+"/"+resultsFile)
	if err != nil {
		return []api.RichResult{}, !errors.Is(err, unix.ENOENT)
	}
	defer unix.Close(fd)
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return []api.RichResult{}, true
	}
	data, full, err := beneath.ReadCapped(fd, st.Size, caps.Bytes+int64(caps.Count)*128+1024)
	if err != nil || !full {
		return []api.RichResult{}, true
	}
	var left struct {
		Results   answerResults `json:"results"`
		Truncated bool          `json:"truncated"`
	}
	// Held to the caps as they are decoded: a file of 8 MiB of tiny
	// bundles would otherwise be 70 MiB of results first.
	left.Results.caps = caps
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&left); err != nil || dec.More() {
		return []api.RichResult{}, true
	}
	return left.Results.List, left.Results.Cut || left.Truncated
}

// collectFigures reads the PNGs the driver saved, in order.
func collectFigures(root int, budget *int64, c *collected) ([]api.Image, bool) {
	imgs, truncated := []api.Image{}, c.truncated
	entries, more, err := beneath.List(root, figureDir, c.lim.MaxEntries)
	if err != nil {
		return imgs, truncated
	}
	if more {
		c.skip(figureDir + "/: not all listed")
		truncated = true
	}
	for _, e := range entries {
		name := e.Name
		fd, st, err := beneath.OpenFile(root, figureDir+"/"+name)
		if err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			continue
		}
		data, full, err := beneath.ReadCapped(fd, st.Size, *budget)
		unix.Close(fd)
		if err != nil || !full {
			c.skip(figureDir + "/" + name + ": over the size cap")
			truncated = true
			continue
		}
		// Kept or not, what was read is off the budget: the same file
		// linked under every name would be read whole under each.
		*budget -= int64(len(data))
		if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
			continue // not a figure the driver saved
		}
		imgs = append(imgs, api.Image{Type: "png", Data: base64.StdEncoding.EncodeToString(data)})
	}
	return imgs, truncated
}

func unchanged(inputs map[string]inputFile, name string, data []byte) bool {
	in, ok := inputs[name]
	return ok && in.size == int64(len(data)) && in.sum == sha256.Sum256(data)
}
