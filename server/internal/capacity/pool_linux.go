package capacity

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/stockade/stockade/api"

	"github.com/stockade/stockade/jail"
)

// Jail is what a pool keeps: a prepared jail waiting for its one use.
type Jail interface {
	// Done is closed when the jail has ended.
	Done() <-chan struct{}
	// Close destroys the jail and gives its share back to b.
	Close(b *Budget) error
}

// Pool keeps up to target jails of one profile prepared. A jail leaves it
// once, to serve one request, and is destroyed after: never reused, never
// reset, so nothing of one run can reach the next.
type Pool[J Jail] struct {
	name    string
	spec    jail.Spec
	target  int
	budget  *Budget
	prepare func(context.Context) (J, error) // makes one jail, whose share the pool took
	logf    func(format string, a ...any)
	failed  func(error) // a close left something behind

	parallel int // set-ups at once, at most

	mu        sync.Mutex
	ready     []waiting[J]
	preparing int
	retryAt   time.Time // no set-up before this, after one failed
	stats     api.PoolStats
	wake      chan struct{}
	done      chan struct{}
	// closing counts the discarded jails take is closing in the
	// background; drain waits for them, or Serve could return (and the
	// process exit) halfway through a close, leaving its cgroup or run
	// directory behind. Added to under mu only, while the pool still
	// has jails: none after drain has emptied it.
	closing sync.WaitGroup
}

// waiting is a jail in the pool and when it was made.
type waiting[J Jail] struct {
	j    J
	made time.Time
}

// NewPool makes the pool of a profile's spec; prepare makes one jail of it.
func NewPool[J Jail](name string, spec jail.Spec, target int, b *Budget, prepare func(context.Context) (J, error), logf func(string, ...any), failed func(error)) *Pool[J] {
	return &Pool[J]{name: name, spec: spec, target: target, budget: b, prepare: prepare, logf: logf, failed: failed,
		parallel: max(1, min(target, runtime.NumCPU())), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (p *Pool[J]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Refill runs until ctx ends, keeping the pool full while the budget has
// room; then it closes every waiting jail. Under back-to-back load the
// requests take jails faster than one set-up at a time makes them, and a
// request that finds the pool empty makes its own jail on its time; so
// refill prepares as many at once as the pool is short, up to one per
// CPU (p.parallel), ahead of the requests to come. Each set-up holds its
// share of the budget from the start, as a request's cold jail does.
func (p *Pool[J]) Refill(ctx context.Context) {
	defer close(p.done)
	defer p.drain()
	var preparing sync.WaitGroup
	defer preparing.Wait() // first: what is being made joins the pool, then drain closes it
	for {
		freed := p.budget.Changed()
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
		if short && ctx.Err() == nil && p.budget.TryTake(p.spec.Cgroup.MemoryMax, p.spec.Cgroup.PidsMax) {
			p.mu.Lock()
			p.preparing++
			p.mu.Unlock()
			preparing.Add(1)
			go func() {
				defer preparing.Done()
				p.prepareOne(ctx)
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
func (p *Pool[J]) prepareOne(ctx context.Context) {
	defer p.poke()
	r, err := p.prepare(ctx)
	p.mu.Lock()
	p.preparing--
	if err != nil {
		p.stats.Failed++
		p.retryAt = time.Now().Add(time.Second)
		p.mu.Unlock()
		p.budget.Give(p.spec.Cgroup.MemoryMax, p.spec.Cgroup.PidsMax)
		if ctx.Err() == nil {
			p.logf("pool %s: prepare a jail: %v", p.name, err)
		}
		return
	}
	p.ready = append(p.ready, waiting[J]{r, time.Now()})
	p.mu.Unlock()
}

// Target is how many jails the pool keeps prepared.
func (p *Pool[J]) Target() int { return p.target }

// Take hands out the oldest waiting jail that is still alive, or the
// zero J. A jail that died while waiting is discarded and reported, never
// handed out.
func (p *Pool[J]) Take() J {
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		r := p.ready[0]
		p.ready = p.ready[1:]
		select {
		case <-r.j.Done():
			p.stats.DiedWaiting++
			p.logf("pool %s: discarded a jail that ended while waiting (made %v ago)", p.name, time.Since(r.made).Round(time.Millisecond))
			// Not on the request's time: a dead jail's close can wait for
			// its cgroup to empty.
			p.closing.Add(1)
			go func() {
				defer p.closing.Done()
				p.close(r.j)
			}()
			continue
		default:
		}
		p.stats.Hits++
		return r.j
	}
	p.stats.Misses++
	var none J
	return none
}

// Evict closes one waiting jail to make room in the budget for a request.
func (p *Pool[J]) Evict() bool {
	p.mu.Lock()
	if len(p.ready) == 0 {
		p.mu.Unlock()
		return false
	}
	r := p.ready[len(p.ready)-1]
	p.ready = p.ready[:len(p.ready)-1]
	p.stats.Evicted++
	p.mu.Unlock()
	p.close(r.j)
	return true
}

// drain closes every waiting jail and waits for the closes take started.
func (p *Pool[J]) drain() {
	p.mu.Lock()
	rs := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, r := range rs {
		p.close(r.j)
	}
	p.closing.Wait()
}

func (p *Pool[J]) close(j J) {
	if err := j.Close(p.budget); err != nil {
		p.failed(err)
	}
}

// Snapshot is the pool's counts now.
func (p *Pool[J]) Snapshot() api.PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Target, s.Ready, s.Preparing = p.target, len(p.ready), p.preparing
	return s
}

// Drained is closed once Refill has returned and every jail it kept is
// closed.
func (p *Pool[J]) Drained() <-chan struct{} { return p.done }

// Spec is the spec of the jails the pool keeps.
func (p *Pool[J]) Spec() jail.Spec { return p.spec }
