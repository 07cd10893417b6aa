package runlock

import (
	"path/filepath"
	"testing"
)

// Numbers held at once are distinct, lowest first; a released one is
// handed out again, and a held one never (the flock, not the file, is the
// proof: the files stay).
func TestIDsAreDistinctWhileHeld(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stockade", "ids")
	var held []*ID
	for i := range 3 {
		id, err := AcquireID(dir)
		if err != nil {
			t.Fatal(err)
		}
		if id.N() != i {
			t.Errorf("id %d got %d", i, id.N())
		}
		held = append(held, id)
	}
	held[1].Release()
	id, err := AcquireID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id.N() != 1 {
		t.Errorf("after releasing 1, got %d", id.N())
	}
	id2, err := AcquireID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id2.N() != 3 {
		t.Errorf("with 0-2 held, got %d", id2.N())
	}
	for _, i := range append(held, id, id2) {
		i.Release()
	}
}
