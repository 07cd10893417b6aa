package jail

import (
	"io"
	"strings"
	"sync"
)

// capture drains one output stream of the jail to the end, keeping at most
// limit bytes (and passing them on to stream, if any, as they come). Past
// the limit it keeps reading and drops: a jail writing into a full pipe
// would block instead of ending, and its time would be charged to it.
type capture struct {
	limit int64

	mu     sync.Mutex // a prepared jail gets its stream while draining
	stream io.Writer
	buf    strings.Builder // String() hands the bytes over without a copy
	total  int64
}

// setStream starts passing output on to w, beginning with what was kept
// before.
func (c *capture) setStream(w io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stream = w
	if w != nil && c.buf.Len() > 0 {
		_, _ = io.WriteString(w, c.buf.String())
	}
}

func (c *capture) add(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	room := c.limit - int64(c.buf.Len())
	if room <= 0 {
		return
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	c.buf.Write(p)
	if c.stream != nil {
		// A caller that stopped reading must not stop the drain.
		_, _ = c.stream.Write(p)
	}
}

// full reports whether the kept bytes reached the limit: from then on
// everything read is only counted.
func (c *capture) full() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.buf.Len()) >= c.limit
}

// count adds n dropped bytes to the total.
func (c *capture) count(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += n
}

func (c *capture) truncated() bool { return c.total > int64(c.buf.Len()) }
