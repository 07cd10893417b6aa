package capacity

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBusy is a request the server could not admit in time.
var ErrBusy = errors.New("server busy")

// Gate admits at most `running` requests at once, queues at most `queue`
// more for at most `wait` each, and at most perCaller (being read, queued
// or running) for one caller uid. A request is counted against its caller
// and against running+queue before its body is read: a body held in memory
// is a request the caps already allow. Past any of these a request is
// refused at once, so an agent backs off instead of piling up connections.
type Gate struct {
	mu       sync.Mutex
	running  int
	queued   int
	arrived  *Quota // every request counted by Arrive: being read, queued or running, per caller
	maxRun   int
	maxQueue int
	wait     time.Duration
	free     chan struct{} // signalled when a slot frees
}

func NewGate(maxRun, maxQueue, perCaller int, wait time.Duration) *Gate {
	return &Gate{maxRun: maxRun, maxQueue: maxQueue, wait: wait,
		arrived: NewQuota(maxRun+maxQueue, perCaller), free: make(chan struct{}, 1)}
}

// ErrCallerCap is a caller over its own cap.
var ErrCallerCap = errors.New("caller over its cap")

// Arrive counts a request of uid before its body is read, or says why not;
// Depart must follow a nil error.
func (g *Gate) Arrive(uid Owner) error {
	switch g.arrived.Take(uid) {
	case ErrUIDQuotaFull:
		return ErrCallerCap
	case ErrQuotaFull:
		return ErrBusy
	}
	return nil
}

func (g *Gate) Depart(uid Owner) { g.arrived.Put(uid) }

// Enter admits an arrived request to run or says why not; Leave must
// follow a nil error.
func (g *Gate) Enter(ctx context.Context) error {
	g.mu.Lock()
	if g.running < g.maxRun {
		g.running++
		g.mu.Unlock()
		return nil
	}
	if g.queued >= g.maxQueue {
		g.mu.Unlock()
		return ErrBusy
	}
	g.queued++
	g.mu.Unlock()
	deadline := time.NewTimer(g.wait)
	defer deadline.Stop()
	for {
		select {
		case <-g.free:
		case <-deadline.C:
			g.drop()
			return ErrBusy
		case <-ctx.Done():
			g.drop()
			return ctx.Err()
		}
		g.mu.Lock()
		if g.running < g.maxRun {
			g.running++
			g.queued--
			more := g.running < g.maxRun && g.queued > 0
			g.mu.Unlock()
			if more {
				g.signal()
			}
			return nil
		}
		g.mu.Unlock()
	}
}

func (g *Gate) drop() {
	g.mu.Lock()
	g.queued--
	g.mu.Unlock()
}

func (g *Gate) Leave() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	g.signal()
}

func (g *Gate) signal() {
	select {
	case g.free <- struct{}{}:
	default:
	}
}

func (g *Gate) Counts() (running, queued int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.queued
}

// Budget is the memory and pids every live jail of the server may hold
// together, waiting in the pool or running: what the cgroups allow each,
// added up. Zero means no budget on that resource.
type Budget struct {
	mu             sync.Mutex
	memMax, pidMax int64
	mem, pids      int64
	freed          chan struct{} // closed (and replaced) when a share is given back
}

func NewBudget(mem, pids int64) *Budget {
	return &Budget{memMax: mem, pidMax: pids, freed: make(chan struct{})}
}

func (b *Budget) TryTake(mem, pids int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.memMax > 0 && b.mem+mem > b.memMax || b.pidMax > 0 && b.pids+pids > b.pidMax {
		return false
	}
	b.mem += mem
	b.pids += pids
	return true
}

func (b *Budget) Give(mem, pids int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mem -= mem
	b.pids -= pids
	close(b.freed)
	b.freed = make(chan struct{})
}

// Changed is closed the next time a share is given back.
func (b *Budget) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freed
}

func (b *Budget) Used() (mem, pids int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem, b.pids
}
