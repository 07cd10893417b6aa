// Package attacks holds the escape suite's programs (see package selftest),
// one Python file per attack. It is a package of its own, importing nothing,
// so that the tests of the packages the suite runs (jail, server, the
// command) can run the same program where they guard the same door, and
// the probe stays one text: fds_inherited.py is the inherited-descriptor
// probe of all of them.
package attacks

import "embed"

// Programs are the attacks' Python sources, by file name.
//
//go:embed *.py
var Programs embed.FS

// Source is the Python source of the program name; it panics when there
// is none, as only a build without that file can cause.
func Source(name string) string {
	b, err := Programs.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// HeldDescriptors is fds_inherited.py's last line when the jail holds no
// descriptor beyond 0-2.
const HeldDescriptors = "HELD the jail holds only 0-2"
