package capacity

import (
	"errors"
	"sync"
)

// Quota counts what callers hold (requests being read, queued or
// running; connections open; sessions held and being made) against two
// caps: max in all and perUID for one caller uid. Zero is no cap. It is
// the one per-uid counter of the server: the gate, the connection limiter
// and the session table each keep one.
type Quota struct {
	mu     sync.Mutex
	max    int
	perUID int
	total  int
	byUID  map[uint32]int // only uids that hold something: a uid's count goes at 0
}

// NewQuota is a quota of max in all and perUID for one uid.
func NewQuota(max, perUID int) *Quota {
	return &Quota{max: max, perUID: perUID, byUID: map[uint32]int{}}
}

var (
	// ErrQuotaFull is every caller together at max.
	ErrQuotaFull = errors.New("the quota of all callers is spent")
	// ErrUIDQuotaFull is one uid at perUID (said before ErrQuotaFull:
	// the caller's own cap is the one it can act on).
	ErrUIDQuotaFull = errors.New("the caller's own quota is spent")
)

// Take counts one more for uid, or says which cap refuses it; Put must
// follow a nil error.
func (q *Quota) Take(uid uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.perUID > 0 && q.byUID[uid] >= q.perUID:
		return ErrUIDQuotaFull
	case q.max > 0 && q.total >= q.max:
		return ErrQuotaFull
	}
	q.total++
	q.byUID[uid]++
	return nil
}

// Put gives back one of uid's.
func (q *Quota) Put(uid uint32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.total--
	if q.byUID[uid]--; q.byUID[uid] <= 0 {
		delete(q.byUID, uid)
	}
}

// Held is what uid holds, and what all callers hold together.
func (q *Quota) Held(uid uint32) (own, total int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byUID[uid], q.total
}
