package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ImportOptions tune ImportWith.
type ImportOptions struct {
	// Progress gets a stage line per layer and a line per entry that was
	// skipped or changed (device nodes, setuid bits); nil for none.
	Progress io.Writer
}

// Import unpacks a container image into dir, which must not exist or be
// empty, without Docker: image is an OCI image layout directory or a
// `docker save` tarball, and no registry is contacted. It is
// ImportWith(ctx, image, dir, ImportOptions{}).
func Import(ctx context.Context, image, dir string) error {
	return ImportWith(ctx, image, dir, ImportOptions{})
}

// ImportWith applies the image's layers in order itself, rather than
// trusting mutate.Extract, with these rules:
//
//   - Whiteouts (.wh.NAME) and opaque directories (.wh..wh..opq) delete what
//     the layers below put there, before the layer's own entries are
//     written, so that they never touch the layer's own files (OCI image
//     spec, "Whiteouts").
//   - An absolute or ".." path, a hardlink to one, and any entry whose
//     parent directory is a symlink fail the import with an
//     *UnsafeEntryError: symlinks are never followed while writing, so a
//     layer that plants lib -> /etc and then writes lib/x is refused, not
//     obeyed. Hardlinks stay inside dir.
//   - Device nodes and FIFOs are skipped (the jail mounts its own /dev).
//   - Setuid and setgid bits are cleared, and no xattrs are written, so no
//     file capabilities either.
//   - Ownership is not kept: everything belongs to the caller (root when
//     root), so no host uid gains files and the jail user can write none.
//     Modes and file mtimes are kept.
//
// On any error dir is removed again (or emptied, if it existed), so a
// failed import leaves no half-made root.
func ImportWith(ctx context.Context, image, dir string, opts ImportOptions) (err error) {
	img, err := openImage(image)
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("image %s: layers: %w", image, err)
	}
	if err := requireEmpty(dir); err != nil {
		return fmt.Errorf("import into %w", err)
	}
	_, statErr := os.Stat(dir)
	created := statErr != nil
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("import into %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			undoImport(dir, created)
		}
	}()
	t, err := openTree(dir)
	if err != nil {
		return err
	}
	defer t.close()
	im := &importer{t: t, prog: newProgress(opts.Progress)}
	for i, l := range layers {
		if err := im.layer(ctx, i+1, len(layers), l); err != nil {
			return err
		}
	}
	if err := t.applyDirModes(); err != nil {
		return fmt.Errorf("import into %s: %w", dir, err)
	}
	im.prog.stage("imported %d layers into %s", len(layers), dir)
	return nil
}

func undoImport(dir string, created bool) {
	if created {
		os.RemoveAll(dir) // unlinkat-based: never follows the image's symlinks
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

type importer struct {
	t    *tree
	prog *progress
}

// layer applies one layer in two passes over its tar: deletions, then
// everything else. The first pass also checks every name, so a layer with
// a hostile name is refused before any of it is written.
func (im *importer) layer(ctx context.Context, n, of int, l v1.Layer) error {
	digest, err := l.Digest()
	if err != nil {
		return fmt.Errorf("layer %d: %w", n, err)
	}
	size, _ := l.Size()
	im.prog.stage("layer %d/%d %s (%s)", n, of, shortDigest(digest.String()), formatBytes(size))
	unsafe := func(name string, err error) error {
		return &UnsafeEntryError{Layer: n, Digest: digest.String(), Entry: name, Reason: err.Error()}
	}
	fail := func(name string, err error) error {
		if errors.Is(err, errThroughSymlink) {
			return unsafe(name, err)
		}
		return fmt.Errorf("layer %d (%s): entry %q: %w", n, shortDigest(digest.String()), name, err)
	}
	err = eachEntry(ctx, l, func(hdr *tar.Header, _ io.Reader) error {
		rel, err := entryPath(hdr.Name)
		if err != nil {
			return unsafe(hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeLink {
			if _, err := entryPath(hdr.Linkname); err != nil {
				return unsafe(hdr.Name, fmt.Errorf("hardlink to %q: %v", hdr.Linkname, err))
			}
		}
		dir, base := splitPath(rel)
		switch {
		case base == opaqueWhiteout:
			err = im.t.clear(dir)
		case strings.HasPrefix(base, whiteoutPrefix):
			// ".wh.." would name the directory itself and ".wh..." its
			// parent: a whiteout deletes a name in its directory, no more.
			name := strings.TrimPrefix(base, whiteoutPrefix)
			if name == "" || name == "." || name == ".." {
				return unsafe(hdr.Name, fmt.Errorf("whiteout of %q", name))
			}
			err = im.t.remove(joinPath(dir, name))
		}
		if err != nil {
			return fail(hdr.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return eachEntry(ctx, l, func(hdr *tar.Header, r io.Reader) error {
		rel, _ := entryPath(hdr.Name) // checked in the first pass
		if _, base := splitPath(rel); strings.HasPrefix(base, whiteoutPrefix) {
			return nil
		}
		if err := im.entry(rel, hdr, r); err != nil {
			return fail(hdr.Name, err)
		}
		return nil
	})
}

func eachEntry(ctx context.Context, l v1.Layer, fn func(*tar.Header, io.Reader) error) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("layer: %w", err)
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

// entry writes one non-whiteout entry.
func (im *importer) entry(rel string, hdr *tar.Header, r io.Reader) error {
	mode := uint32(hdr.Mode) & 0o1777 // permissions and sticky; never setuid or setgid
	if hdr.Mode&0o6000 != 0 && (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeDir) {
		im.prog.stage("cleared %s on %s", suidWord(hdr.Mode), rel)
	}
	if rel == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the root keeps the mode Import gave it
		}
		return fmt.Errorf("a %q entry for the root directory itself", hdr.Typeflag)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return im.t.mkdir(rel, mode)
	case tar.TypeReg:
		return im.t.create(rel, r, mode&0o777, hdr.ModTime)
	case tar.TypeSymlink:
		return im.t.symlink(rel, hdr.Linkname)
	case tar.TypeLink:
		target, _ := entryPath(hdr.Linkname) // checked in the first pass
		if target == rel {
			return nil
		}
		return im.t.link(rel, target)
	case tar.TypeChar, tar.TypeBlock:
		im.prog.stage("skipped %s: a device node (the jail mounts its own /dev)", rel)
	case tar.TypeFifo:
		im.prog.stage("skipped %s: a FIFO", rel)
	default:
		im.prog.stage("skipped %s: tar entry type %q", rel, hdr.Typeflag)
	}
	return nil
}

func suidWord(mode int64) string {
	switch {
	case mode&0o6000 == 0o6000:
		return "setuid and setgid"
	case mode&0o4000 != 0:
		return "setuid"
	}
	return "setgid"
}
