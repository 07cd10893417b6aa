//go:build !embed_jailinit

package jail

// initExe is empty in builds without the embedded init (go test, a plain
// go build): Run re-executes /proc/self/exe as init instead.
var initExe []byte
