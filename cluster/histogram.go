package cluster

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

// waitBuckets are the queue wait histogram's upper bounds, in seconds:
// from a run taken at once (a few ms: publish, fetch, claim) to one that
// waited most of the default queue_wait.
var waitBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// histogram is a Prometheus histogram of durations.
type histogram struct {
	mu     sync.Mutex
	counts [14]int64 // per bucket of waitBuckets, then +Inf; not cumulative
	sum    float64
	n      int64
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(waitBuckets) && s > waitBuckets[i] {
		i++
	}
	h.mu.Lock()
	h.counts[i]++
	h.sum += s
	h.n++
	h.mu.Unlock()
}

// write is the histogram in Prometheus' text format: cumulative buckets,
// _sum and _count.
func (h *histogram) write(w io.Writer, name, help string) {
	h.mu.Lock()
	counts, sum, n := h.counts, h.sum, h.n
	h.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum int64
	for i, b := range waitBuckets {
		cum += counts[i]
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", name, strconv.FormatFloat(b, 'g', -1, 64), cum)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n", name, n, name, strconv.FormatFloat(sum, 'g', -1, 64), name, n)
}
