package server

import (
	"context"
	"os"
	"time"

	"github.com/stockade/stockade/api"
	"github.com/stockade/stockade/server/internal/kernel"

	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server/internal/capacity"
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
func (r *ready) close(b *capacity.Budget) error {
	r.stdin.Close()
	r.driver.Close()
	err := r.p.Close()
	b.Give(r.mem, r.pids)
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

// Done is closed when the jail has ended (capacity.Jail).
func (r *ready) Done() <-chan struct{} { return r.p.Done() }

// Close destroys the jail and gives back its share of budget
// (capacity.Jail).
func (r *ready) Close(b *capacity.Budget) error { return r.close(b) }

// usePool takes a waiting jail of p for a request its jails serve, and
// says what the pool did for it.
func usePool[J capacity.Jail](p *capacity.Pool[J]) (J, api.PoolUse) {
	var none J
	if p.Target() == 0 {
		return none, api.PoolUse{Reason: "no pool"}
	}
	if r := p.Take(); any(r) != any(none) {
		return r, api.PoolUse{Hit: true}
	}
	return none, api.PoolUse{Reason: "pool empty"}
}

// PoolStats is what GET /v1/health reports of one profile's pool.
type PoolStats = api.PoolStats
