package server

import (
	"context"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/kernel"
)

// ready is one prepared jail, the write end of its stdin pipe and the
// server's end of its driver channel (used if it becomes a session).
type ready struct {
	p      *jail.Prepared
	stdin  *os.File
	driver *os.File
	spec   jail.Spec
	made   time.Time
	mem    int64 // what it holds of the budget
	pids   int64
}

// close destroys the jail and gives back its share of the budget. The
// error names a cgroup or run directory it could not remove (still
// recorded in the jail's run lock slot, for jail.Sweep).
func (r *ready) close(b *budget) error {
	r.stdin.Close()
	r.driver.Close()
	err := r.p.Close()
	b.give(r.mem, r.pids)
	return err
}

// prepareJail makes one jail that waits for its job on stdin. The caller
// has taken its share of the budget.
func prepareJail(ctx context.Context, spec jail.Spec, notices *os.File) (*ready, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	drv, drvJail, err := kernel.Socket()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	p, err := jail.Prepare(ctx, spec, jail.Streams{Stdin: r, Notices: notices, Pass: []*os.File{drvJail}})
	r.Close() // the jail holds its own copies
	drvJail.Close()
	if err != nil {
		w.Close()
		drv.Close()
		return nil, err
	}
	return &ready{p: p, stdin: w, driver: drv, spec: spec, made: time.Now(),
		mem: spec.Cgroup.MemoryMax, pids: spec.Cgroup.PidsMax}, nil
}

// pool keeps up to target jails of one profile prepared. A jail leaves it
// once, to serve one request, and is destroyed after: never reused, never
// reset, so nothing of one run can reach the next.
type pool struct {
	name   string
	spec   jail.Spec
	target int
	budget *budget
	logf   func(format string, a ...any)
	failed func(error) // a close left something behind

	parallel int // set-ups at once, at most

	mu        sync.Mutex
	ready     []*ready
	preparing int
	retryAt   time.Time // no set-up before this, after one failed
	stats     PoolStats
	wake      chan struct{}
	done      chan struct{}
	// closing counts the discarded jails take is closing in the
	// background; drain waits for them, or Serve could return (and the
	// process exit) halfway through a close, leaving its cgroup or run
	// directory behind. Added to under mu only, while the pool still
	// has jails: none after drain has emptied it.
	closing sync.WaitGroup
}

// PoolStats is what GET /v1/health reports of one profile's pool.
type PoolStats struct {
	Target      int `json:"target"`
	Ready       int `json:"ready"`
	Preparing   int `json:"preparing"`
	Hits        int `json:"hits"`
	Misses      int `json:"misses"`
	DiedWaiting int `json:"died_waiting"` // discarded: the jail ended while waiting
	Failed      int `json:"failed"`       // set-ups that failed
	Evicted     int `json:"evicted"`      // given up to make room in the budget
}

func newPool(name string, spec jail.Spec, target int, b *budget, logf func(string, ...any), failed func(error)) *pool {
	return &pool{name: name, spec: spec, target: target, budget: b, logf: logf, failed: failed,
		parallel: max(1, min(target, runtime.NumCPU())), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// refill runs until ctx ends, keeping the pool full while the budget has
// room; then it closes every waiting jail. Under back-to-back load the
// requests take jails faster than one set-up at a time makes them, and a
// request that finds the pool empty makes its own jail on its time; so
// refill prepares as many at once as the pool is short, up to one per
// CPU (p.parallel), ahead of the requests to come. Each set-up holds its
// share of the budget from the start, as a request's cold jail does.
func (p *pool) refill(ctx context.Context, notices *os.File) {
	defer close(p.done)
	defer p.drain()
	var preparing sync.WaitGroup
	defer preparing.Wait() // first: what is being made joins the pool, then drain closes it
	for {
		freed := p.budget.changed()
		p.mu.Lock()
		short := len(p.ready)+p.preparing < p.target && p.preparing < p.parallel
		wait := time.Until(p.retryAt)
		p.mu.Unlock()
		if short && wait > 0 {
			// A set-up failed lately: do not spin on a host that cannot
			// make jails.
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		if short && ctx.Err() == nil && p.budget.tryTake(p.spec.Cgroup.MemoryMax, p.spec.Cgroup.PidsMax) {
			p.mu.Lock()
			p.preparing++
			p.mu.Unlock()
			preparing.Add(1)
			go func() {
				defer preparing.Done()
				p.prepareOne(ctx, notices)
			}()
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-freed:
		}
	}
}

// prepareOne makes one jail for the pool, whose share of the budget the
// caller took, and wakes refill when it is done.
func (p *pool) prepareOne(ctx context.Context, notices *os.File) {
	defer p.poke()
	r, err := prepareJail(ctx, p.spec, notices)
	p.mu.Lock()
	p.preparing--
	if err != nil {
		p.stats.Failed++
		p.retryAt = time.Now().Add(time.Second)
		p.mu.Unlock()
		p.budget.give(p.spec.Cgroup.MemoryMax, p.spec.Cgroup.PidsMax)
		if ctx.Err() == nil {
			p.logf("pool %s: prepare a jail: %v", p.name, err)
		}
		return
	}
	p.ready = append(p.ready, r)
	p.mu.Unlock()
}

// use takes a waiting jail for a request its jails serve, and says what
// the pool did for it.
func (p *pool) use() (*ready, PoolUse) {
	if p.target == 0 {
		return nil, PoolUse{Reason: "no pool"}
	}
	if r := p.take(); r != nil {
		return r, PoolUse{Hit: true}
	}
	return nil, PoolUse{Reason: "pool empty"}
}

// take hands out the oldest waiting jail that is still alive, or nil.
// A jail that died while waiting is discarded and reported, never handed
// out.
func (p *pool) take() *ready {
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		r := p.ready[0]
		p.ready = p.ready[1:]
		select {
		case <-r.p.Done():
			p.stats.DiedWaiting++
			p.logf("pool %s: discarded a jail that ended while waiting (made %v ago)", p.name, time.Since(r.made).Round(time.Millisecond))
			// Not on the request's time: a dead jail's close can wait for
			// its cgroup to empty.
			p.closing.Add(1)
			go func() {
				defer p.closing.Done()
				p.close(r)
			}()
			continue
		default:
		}
		p.stats.Hits++
		return r
	}
	p.stats.Misses++
	return nil
}

// evict closes one waiting jail to make room in the budget for a request.
func (p *pool) evict() bool {
	p.mu.Lock()
	if len(p.ready) == 0 {
		p.mu.Unlock()
		return false
	}
	r := p.ready[len(p.ready)-1]
	p.ready = p.ready[:len(p.ready)-1]
	p.stats.Evicted++
	p.mu.Unlock()
	p.close(r)
	return true
}

// drain closes every waiting jail and waits for the closes take started.
func (p *pool) drain() {
	p.mu.Lock()
	rs := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, r := range rs {
		p.close(r)
	}
	p.closing.Wait()
}

func (p *pool) close(r *ready) {
	if err := r.close(p.budget); err != nil {
		p.failed(err)
	}
}

func (p *pool) snapshot() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Target, s.Ready, s.Preparing = p.target, len(p.ready), p.preparing
	return s
}
