//go:build embed_jailinit

package jail

import _ "embed"

// initExe is the static jailinit binary (make build puts it at
// jail/jailinit.bin and builds with -tags embed_jailinit).
//
//go:embed jailinit.bin
var initExe []byte
