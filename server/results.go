package server

import "github.com/stockade/stockade/server/internal/kernel"

// richCaps bound a run's or an exec's rich results (kernel.RichCaps): the
// driver keeps to them, and boundResults holds its answer to them again.
type richCaps = kernel.RichCaps

// The rich results' caps (docs/server.md names them): 64 results per
// exec, 2 MiB each, --files-max in all; 16 MIME types per result.
const (
	maxResults      = 64
	maxBundleBytes  = 2 << 20
	maxBundleTypes  = 16
	maxMIMETypeName = 127
)

func richCapsOf(filesMax int64, formats []string) richCaps {
	if len(formats) == 0 {
		formats = []string{"png"}
	}
	return richCaps{Count: maxResults, Bundle: min(maxBundleBytes, filesMax), Bytes: filesMax, Formats: formats}
}
