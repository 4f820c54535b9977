package schedule

import (
	"sync"
	"time"
)

// budget is a sliding one-hour window of bytes moved by a target's probes.
type budget struct {
	mu     sync.Mutex
	limit  int64
	spends []spend
}

type spend struct {
	at    time.Time
	bytes int64
}

func (b *budget) setLimit(limit int64) {
	b.mu.Lock()
	b.limit = limit
	b.mu.Unlock()
}

func (b *budget) allows(now time.Time, need int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit <= 0 {
		return true
	}
	return b.usedLocked(now)+need <= b.limit
}

func (b *budget) spend(now time.Time, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spends = append(b.spends, spend{now, bytes})
}

func (b *budget) usedLocked(now time.Time) int64 {
	cut := 0
	for cut < len(b.spends) && now.Sub(b.spends[cut].at) >= time.Hour {
		cut++
	}
	b.spends = b.spends[cut:]
	var used int64
	for _, s := range b.spends {
		used += s.bytes
	}
	return used
}
