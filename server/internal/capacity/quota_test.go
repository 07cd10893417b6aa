package capacity

import (
	"errors"
	"sync"
	"testing"
)

// A uid past its own cap is refused as itself, every uid together past
// the total as busy; what is given back can be taken again, and a uid
// that holds nothing is not kept.
func TestQuota(t *testing.T) {
	q := NewQuota(5, 2)
	steps := []struct {
		take bool
		uid  uint32
		want error
	}{
		{true, 1, nil}, {true, 1, nil}, {true, 1, ErrUIDQuotaFull},
		{true, 2, nil}, {true, 2, nil}, {true, 3, nil},
		{true, 3, ErrQuotaFull}, {true, 2, ErrUIDQuotaFull},
		{false, 1, nil}, {true, 3, nil}, {true, 4, ErrQuotaFull},
		{false, 3, nil}, {false, 3, nil}, {true, 1, nil},
	}
	for i, s := range steps {
		if !s.take {
			q.Put(Owner{UID: s.uid})
			continue
		}
		if err := q.Take(Owner{UID: s.uid}); !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Fatalf("step %d: uid %d took: %v, want %v", i, s.uid, err, s.want)
		}
	}
	if own, _ := q.Held(Owner{UID: 1, Tenant: "t"}); own != 0 {
		t.Errorf("tenant t with uid 1's number holds %d: uid 1's", own)
	}
	if own, total := q.Held(Owner{UID: 1}); own != 2 || total != 4 {
		t.Errorf("uid 1 holds %d of %d, want 2 of 4", own, total)
	}
	if _, ok := q.byUID[Owner{UID: 3}]; ok {
		t.Error("a uid that holds nothing is still kept")
	}
	// Zero caps: none.
	free := NewQuota(0, 0)
	for range 1000 {
		if err := free.Take(Owner{UID: 7}); err != nil {
			t.Fatal(err)
		}
	}
}

// Taken and given back from many goroutines at once, the quota never
// lets one uid past its cap nor all of them past the total.
func TestQuotaConcurrent(t *testing.T) {
	q := NewQuota(8, 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	over := ""
	for g := range 16 {
		wg.Add(1)
		go func(uid Owner) {
			defer wg.Done()
			for range 2000 {
				if q.Take(uid) != nil {
					continue
				}
				own, total := q.Held(uid)
				if own > 3 || total > 8 {
					mu.Lock()
					over = "past a cap"
					mu.Unlock()
				}
				q.Put(uid)
			}
		}(Owner{UID: uint32(g % 4)})
	}
	wg.Wait()
	if own, total := q.Held(Owner{}); over != "" || own != 0 || total != 0 {
		t.Errorf("%s; left held: %d of %d", over, own, total)
	}
}
