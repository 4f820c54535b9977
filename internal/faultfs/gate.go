package faultfs

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// gate holds the current mode and the counters, and makes every request
// wait for its verdict. It is separate from the mount so the waiting,
// waking and counting can be tested without root.
type gate struct {
	mu sync.Mutex
	// mode is the behaviour applied to the next decision.
	mode Mode
	// changed is closed and replaced on every Set so that waiting
	// requests wake up and decide again under the new mode.
	changed chan struct{}
	// blocked counts requests waiting in Hang or Latency.
	blocked int
	// blockedChanged is closed and replaced whenever blocked moves, so
	// WaitBlocked needs no polling interval.
	blockedChanged chan struct{}
	seen           map[Op]uint64
	total          uint64
	interrupted    uint64
}

func newGate(m Mode) *gate {
	return &gate{
		mode:           m,
		changed:        make(chan struct{}),
		blockedChanged: make(chan struct{}),
		seen:           make(map[Op]uint64),
	}
}

func (g *gate) set(m Mode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = m
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *gate) current() Mode {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mode
}

// addBlocked must be called with mu held.
func (g *gate) addBlocked(n int) {
	g.blocked += n
	close(g.blockedChanged)
	g.blockedChanged = make(chan struct{})
}

// enter counts one request and applies the current mode to it. It
// returns 0 when the request may pass through to the backing directory.
// While it waits it honours ctx, which go-fuse cancels when the kernel
// sends FUSE_INTERRUPT (the caller got a signal): returning EINTR then is
// what lets a SIGKILLed caller finish dying, because the kernel waits for
// the reply of a request it has already handed to the daemon.
func (g *gate) enter(ctx context.Context, op Op, c class) syscall.Errno {
	g.mu.Lock()
	g.seen[op]++
	g.total++
	for {
		v := decide(g.mode, c)
		if !v.hang && v.delay <= 0 {
			g.mu.Unlock()
			return v.errno
		}
		changed := g.changed
		g.addBlocked(1)
		g.mu.Unlock()

		elapsed, interrupted := wait(ctx, v, changed)
		g.mu.Lock()
		g.addBlocked(-1)
		if interrupted {
			g.interrupted++
			g.mu.Unlock()
			return syscall.EINTR
		}
		if elapsed {
			g.mu.Unlock()
			return 0
		}
		// The mode changed: decide again, so a request released
		// from Hang into Stale fails like any new request would.
	}
}

// wait sleeps out v (forever when v.hang) and tells whether the delay
// elapsed or ctx was cancelled; both false means changed was closed.
func wait(ctx context.Context, v verdict, changed <-chan struct{}) (elapsed, interrupted bool) {
	var timeout <-chan time.Time
	if !v.hang {
		t := time.NewTimer(v.delay)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-timeout:
		return true, false
	case <-ctx.Done():
		return false, true
	case <-changed:
		return false, false
	}
}

func (g *gate) count(op Op) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen[op]
}

func (g *gate) ops() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

func (g *gate) interrupts() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.interrupted
}

func (g *gate) blockedNow() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked
}

// waitBlocked returns once ok(blocked) holds or ctx ends.
func (g *gate) waitBlocked(ctx context.Context, what string, ok func(int) bool) error {
	for {
		g.mu.Lock()
		n, ch := g.blocked, g.blockedChanged
		g.mu.Unlock()
		if ok(n) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("faultfs: waiting for %s blocked operations, have %d: %w", what, n, ctx.Err())
		}
	}
}
