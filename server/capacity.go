package server

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errBusy is a request the server could not admit in time.
var errBusy = errors.New("server busy")

// gate admits at most `running` requests at once, queues at most `queue`
// more for at most `wait` each, and at most perCaller (being read, queued
// or running) for one caller uid. A request is counted against its caller
// and against running+queue before its body is read: a body held in memory
// is a request the caps already allow. Past any of these a request is
// refused at once, so an agent backs off instead of piling up connections.
type gate struct {
	mu        sync.Mutex
	running   int
	queued    int
	arrived   int // every request counted by arrive: being read, queued or running
	maxRun    int
	maxQueue  int
	wait      time.Duration
	perCaller int
	byCaller  map[uint32]int
	free      chan struct{} // signalled when a slot frees
}

func newGate(maxRun, maxQueue, perCaller int, wait time.Duration) *gate {
	return &gate{maxRun: maxRun, maxQueue: maxQueue, perCaller: perCaller, wait: wait,
		byCaller: map[uint32]int{}, free: make(chan struct{}, 1)}
}

// errCallerCap is a caller over its own cap.
var errCallerCap = errors.New("caller over its cap")

// arrive counts a request of uid before its body is read, or says why not;
// depart must follow a nil error.
func (g *gate) arrive(uid uint32) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.perCaller > 0 && g.byCaller[uid] >= g.perCaller {
		return errCallerCap
	}
	if g.arrived >= g.maxRun+g.maxQueue {
		return errBusy
	}
	g.arrived++
	g.byCaller[uid]++
	return nil
}

func (g *gate) depart(uid uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrived--
	if g.byCaller[uid]--; g.byCaller[uid] <= 0 {
		delete(g.byCaller, uid)
	}
}

// enter admits an arrived request to run or says why not; leave must
// follow a nil error.
func (g *gate) enter(ctx context.Context) error {
	g.mu.Lock()
	if g.running < g.maxRun {
		g.running++
		g.mu.Unlock()
		return nil
	}
	if g.queued >= g.maxQueue {
		g.mu.Unlock()
		return errBusy
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
			return errBusy
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

func (g *gate) drop() {
	g.mu.Lock()
	g.queued--
	g.mu.Unlock()
}

func (g *gate) leave() {
	g.mu.Lock()
	g.running--
	g.mu.Unlock()
	g.signal()
}

func (g *gate) signal() {
	select {
	case g.free <- struct{}{}:
	default:
	}
}

func (g *gate) counts() (running, queued int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.queued
}

// budget is the memory and pids every live jail of the server may hold
// together, waiting in the pool or running: what the cgroups allow each,
// added up. Zero means no budget on that resource.
type budget struct {
	mu             sync.Mutex
	memMax, pidMax int64
	mem, pids      int64
	freed          chan struct{} // closed (and replaced) when a share is given back
}

func newBudget(mem, pids int64) *budget {
	return &budget{memMax: mem, pidMax: pids, freed: make(chan struct{})}
}

func (b *budget) tryTake(mem, pids int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.memMax > 0 && b.mem+mem > b.memMax || b.pidMax > 0 && b.pids+pids > b.pidMax {
		return false
	}
	b.mem += mem
	b.pids += pids
	return true
}

func (b *budget) give(mem, pids int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mem -= mem
	b.pids -= pids
	close(b.freed)
	b.freed = make(chan struct{})
}

// changed is closed the next time a share is given back.
func (b *budget) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freed
}

func (b *budget) used() (mem, pids int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem, b.pids
}
