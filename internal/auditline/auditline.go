// Package auditline writes one line of an audit log so that a failed
// write costs at most that line: a line cut short mid-way leaves the file
// ending mid-line, and the next line then begins with a newline (one torn
// line, never two run together). `stockade serve`'s audit log and the
// gateway's both write through it; each counts and says its failures in
// its own words.
package auditline

import "io"

// Write writes line (ending in a newline) to w, a newline first when
// torn says the file ends mid-line. It returns whether the file now ends
// mid-line, and the write's error (io.ErrShortWrite for a short write
// without one).
func Write(w io.Writer, line []byte, torn bool) (bool, error) {
	buf := line
	if torn {
		buf = append([]byte{'\n'}, line...)
	}
	n, err := w.Write(buf)
	if err == nil && n < len(buf) {
		err = io.ErrShortWrite
	}
	if n > 0 {
		// The file ends mid-line when part of the line itself went in.
		torn = err != nil && n > len(buf)-len(line)
	}
	return torn, err
}
