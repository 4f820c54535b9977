package wait

import (
	"errors"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	Until(t, "the third look", time.Minute, func() (bool, error) {
		n++
		return n >= 3, errors.New("not yet")
	})
	if n != 3 {
		t.Errorf("cond was called %d times, want 3", n)
	}
}

func TestUntilWithPollsAtItsPace(t *testing.T) {
	start := time.Now()
	n := 0
	UntilWith(t, Options{Every: 20 * time.Millisecond}, "two looks", time.Minute, Bool(func() bool {
		n++
		return n == 2
	}))
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("two looks %s apart, want at least the 20ms asked for", d)
	}
}
