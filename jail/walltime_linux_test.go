package jail

import (
	"testing"
	"time"
)

// TestWallTimeNeverNegative: doctor printed "default jail: ok (... -0.8 ms)"
// when the payload ended before Start began the run's clock.
func TestWallTimeNeverNegative(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name                       string
		begin, started, clock, end time.Time
		want                       time.Duration
	}{
		{"pooled: from the clock", at(0), at(5), at(50), at(60), 10 * time.Millisecond},
		{"ended before the clock: from the payload's start", at(0), at(5), at(9), at(8), 3 * time.Millisecond},
		{"no clock: from the payload's start", at(0), at(5), time.Time{}, at(8), 3 * time.Millisecond},
		{"never started: from launch", at(0), time.Time{}, time.Time{}, at(4), 4 * time.Millisecond},
	} {
		if got := wallTime(c.begin, c.started, c.clock, c.end); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
