package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// openImage opens an OCI image layout directory (one with an oci-layout
// file) or a `docker save` tarball. Nothing is read from a registry.
func openImage(image string) (v1.Image, error) {
	fi, err := os.Stat(image)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", image, err)
	}
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(image, "oci-layout")); err != nil {
			return nil, fmt.Errorf("image %s: a directory, but not an OCI image layout (no oci-layout file)", image)
		}
		idx, err := layout.ImageIndexFromPath(image)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", image, err)
		}
		img, err := pickImage(idx, platformOS, runtime.GOARCH)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", image, err)
		}
		return img, nil
	}
	img, err := tarball.ImageFromPath(image, nil)
	if err != nil {
		hint := ""
		if errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "manifest.json") {
			hint = " (an OCI archive without manifest.json: untar it and import the directory)"
		}
		return nil, fmt.Errorf("image %s: not a docker save archive%s: %w", image, hint, err)
	}
	return img, nil
}

// platformOS is the only OS a jail runs.
const platformOS = "linux"

// pickImage finds in an index (recursing into nested indexes, as buildx
// writes them) the one image for os/arch, or the only image if the index
// names no platforms.
func pickImage(idx v1.ImageIndex, os, arch string) (v1.Image, error) {
	var found []v1.Image
	var seen []string
	if err := collectImages(idx, os, arch, &found, &seen, 0); err != nil {
		return nil, err
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("no image for %s/%s in the index (it has %s)", os, arch, orNone(seen))
	}
	return nil, fmt.Errorf("%d images for %s/%s in the index; keep one", len(found), os, arch)
}

func collectImages(idx v1.ImageIndex, os, arch string, found *[]v1.Image, seen *[]string, depth int) error {
	if depth > 4 {
		return fmt.Errorf("image indexes nested more than 4 deep")
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			if err := collectImages(child, os, arch, found, seen, depth+1); err != nil {
				return err
			}
			continue
		}
		if !d.MediaType.IsImage() {
			continue // attestations, signatures
		}
		if p := d.Platform; p != nil {
			*seen = append(*seen, p.OS+"/"+p.Architecture)
			if p.OS != os || p.Architecture != arch {
				continue
			}
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		*found = append(*found, img)
	}
	return nil
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
