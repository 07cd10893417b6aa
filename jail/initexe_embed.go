//go:build stockade_embed_init

package jail

import _ "embed"

// initExe is the static stockade-init binary (make build puts it in
// initexe/ and builds with -tags stockade_embed_init).
//
//go:embed initexe/stockade-init
var initExe []byte
