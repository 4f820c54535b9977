package collector

import (
	"sync/atomic"
	"testing"
	"time"
)

// A scrape waits for the first round at most the timeout and a second,
// then exports the last finished round without waiting for the next.
func TestBackgroundRoundsExportTheLastFinishedRound(t *testing.T) {
	release := make(chan struct{})
	var rounds atomic.Int32
	b := newBackgroundRounds(20*time.Millisecond, 100*time.Millisecond, func() int {
		n := rounds.Add(1)
		if n == 1 {
			<-release // the first round blocks, as a read of an evicted client does
		}
		return int(n)
	})
	begin := time.Now()
	if _, ok := b.latest(); ok {
		t.Fatal("a round that has not finished was exported")
	}
	if d := time.Since(begin); d > 30*time.Second {
		t.Fatalf("latest waited %s for a blocked round", d)
	}
	close(release)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if v, ok := b.latest(); ok && v >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no round after the first one returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Close()
	after := rounds.Load()
	time.Sleep(100 * time.Millisecond)
	if rounds.Load() != after {
		t.Errorf("rounds ran after Close: %d, then %d", after, rounds.Load())
	}
}
