package image

import (
	"fmt"
	"strings"
)

// UnsafeEntryError is an image entry that would write outside the root
// directory or through a symlink: an absolute or ".." path, a hardlink to
// one, or a path whose parent is a symlink. Images made by docker, buildkit
// or kaniko never hold one, so one that does was crafted; Import fails
// rather than hand back a root built from the rest of it.
type UnsafeEntryError struct {
	Layer  int    // 1-based, bottom first
	Digest string // the layer's digest
	Entry  string // the entry's name as the tar has it
	Reason string
}

func (e *UnsafeEntryError) Error() string {
	return fmt.Sprintf("layer %d (%s): entry %q: refused: %s", e.Layer, shortDigest(e.Digest), e.Entry, e.Reason)
}

// whiteoutPrefix marks a deletion in an OCI layer: .wh.NAME deletes NAME
// from the layers below, and opaqueWhiteout in a directory deletes all that
// the layers below put in it.
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// entryPath turns a tar entry name into a clean path relative to the root
// ("." for the root itself), or says why it is refused. "./" prefixes and
// doubled slashes are normal in layers and dropped; a leading "/" and any
// ".." component are refused, not cleaned away, since they only appear in
// archives made to escape.
func entryPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("absolute path")
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
		case "..":
			return "", fmt.Errorf(`".." in the path`)
		default:
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

// splitPath returns a clean relative path's parent ("." at the top) and
// base name.
func splitPath(rel string) (parent, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// joinPath joins a clean relative directory and a base name.
func joinPath(dir, base string) string {
	if dir == "." {
		return base
	}
	return dir + "/" + base
}

func shortDigest(d string) string {
	if algo, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return algo + ":" + hex[:12]
	}
	return d
}
