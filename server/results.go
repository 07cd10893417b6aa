package server

// richCaps bound an exec's rich results: the driver keeps to them, and
// boundResults holds its answer to them again, since the driver runs in
// the cell's interpreter and the cell can say anything in its name.
// Sizes are bytes of JSON, as the answer's frame carries them.
type richCaps struct {
	Count   int      `json:"count"`   // results per exec
	Bundle  int64    `json:"bundle"`  // bytes of one result's MIME values and their names
	Bytes   int64    `json:"bytes"`   // bytes of all an exec's results
	Formats []string `json:"formats"` // the figures' formats: "png", "svg"
}

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
