package capacity

import (
	"errors"
	"strconv"
	"sync"
)

// Owner is who holds what a Quota counts and owns a session: a caller of
// the unix socket by its uid, or a tenant a cluster node serves (Tenant
// set). Two owners are one only when both fields are equal: no uid is
// ever a tenant, whatever its number, nor a tenant a uid.
type Owner struct {
	UID    uint32 // a socket caller's (SO_PEERCRED); a tenant's is the audit log's number for it
	Tenant string // "" for a socket caller
}

// String names the owner in a log line: "uid N" or "tenant NAME".
func (o Owner) String() string {
	if o.Tenant != "" {
		return "tenant " + o.Tenant
	}
	return "uid " + strconv.FormatUint(uint64(o.UID), 10)
}

// Quota counts what callers hold (requests being read, queued or
// running; connections open; sessions held and being made) against two
// caps: max in all and perUID for one caller (an Owner). Zero is no cap.
// It is the one per-caller counter of the server: the gate, the
// connection limiter and the session table each keep one.
type Quota struct {
	mu     sync.Mutex
	max    int
	perUID int
	total  int
	byUID  map[Owner]int // only owners that hold something: a count goes at 0
}

// NewQuota is a quota of max in all and perUID for one owner.
func NewQuota(max, perUID int) *Quota {
	return &Quota{max: max, perUID: perUID, byUID: map[Owner]int{}}
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
func (q *Quota) Take(uid Owner) error {
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
func (q *Quota) Put(uid Owner) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.total--
	if q.byUID[uid]--; q.byUID[uid] <= 0 {
		delete(q.byUID, uid)
	}
}

// Held is what uid holds, and what all callers hold together.
func (q *Quota) Held(uid Owner) (own, total int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byUID[uid], q.total
}
