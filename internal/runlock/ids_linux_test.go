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
		id, err := AcquireID(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		if id.N() != i {
			t.Errorf("id %d got %d", i, id.N())
		}
		held = append(held, id)
	}
	held[1].Release()
	id, err := AcquireID(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if id.N() != 1 {
		t.Errorf("after releasing 1, got %d", id.N())
	}
	id2, err := AcquireID(dir, 0)
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

// A free hint is taken as it is; a held one, or one out of range, falls
// back to the lowest free number, so two runs whose hints collide (slots
// of two lock directories) still get distinct numbers.
func TestIDHint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stockade", "ids")
	a, err := AcquireID(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	if a.N() != 5 {
		t.Errorf("free hint 5: got %d", a.N())
	}
	b, err := AcquireID(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	if b.N() != 0 {
		t.Errorf("held hint 5: got %d, want the lowest free, 0", b.N())
	}
	c, err := AcquireID(dir, MaxSlots)
	if err != nil {
		t.Fatal(err)
	}
	if c.N() != 1 {
		t.Errorf("hint out of range: got %d, want 1", c.N())
	}
	a.Release()
	d, err := AcquireID(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	if d.N() != 5 {
		t.Errorf("hint 5 released: got %d", d.N())
	}
	for _, i := range []*ID{b, c, d} {
		i.Release()
	}
}
