package collector

// The guard for calls that can hang in uninterruptible sleep: the external
// commands (exec.go) and the NVMe SMART reads (nvme.go) both start through
// it, so that neither starts a second copy of a call stuck in the kernel.

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// errStillRunning is returned when a call for the same key, a command or
// a read started by an earlier scrape, has not returned yet. Starting a
// second copy would pile up processes or threads behind a wedged file
// system or device, so the scrape fails instead.
var errStillRunning = errors.New("previous run has not exited yet")

// stuckCalls runs calls that can hang in D state (a command on a hung GPFS
// or NFS mount, an admin command to an NVMe controller whose fabrics target
// is gone), each in a goroutine of its own, and remembers by key those that
// have not returned. Neither a deadline nor SIGKILL ends such a call, so
// the caller bounds only its own wait on the result; the guard refuses a
// new call for the key until the stuck one returns, because each would
// otherwise hold one more thread or process in the kernel, every scrape,
// until the device recovers. The zero value is ready to use.
type stuckCalls[T any] struct {
	mu      sync.Mutex
	running map[string]startedCall
}

// startedCall is what stuckCalls remembers of a call that has not returned.
type startedCall struct {
	started time.Time
	// pid is the process the call waits for, 0 when it is not a process.
	pid int
}

// stillRunningError refuses a call because key's earlier call has not
// returned; it wraps errStillRunning.
type stillRunningError struct {
	key string
	startedCall
}

func (e *stillRunningError) Error() string {
	what := e.key
	if e.pid != 0 {
		what += fmt.Sprintf(" (pid %d)", e.pid)
	}
	return fmt.Sprintf("%s, started %s ago: %s", what, time.Since(e.started).Round(time.Millisecond), errStillRunning)
}

func (e *stillRunningError) Unwrap() error { return errStillRunning }

// start runs begin and then, in a goroutine of its own, call; the channel
// it returns receives call's result when call returns, and only then may
// key's next call start. begin, when not nil, is the part that must not
// run twice either but does not block, such as starting a process: it runs
// under the guard's lock, so two callers never both begin key, and returns
// the pid of what it started. If begin fails, key stays free and start
// returns begin's error. While key's earlier call has not returned, start
// runs neither and returns a *stillRunningError.
func (g *stuckCalls[T]) start(key string, begin func() (pid int, err error), call func() T) (<-chan T, error) {
	g.mu.Lock()
	if prev, ok := g.running[key]; ok {
		g.mu.Unlock()
		return nil, &stillRunningError{key: key, startedCall: prev}
	}
	var pid int
	if begin != nil {
		var err error
		if pid, err = begin(); err != nil {
			g.mu.Unlock()
			return nil, err
		}
	}
	if g.running == nil {
		g.running = map[string]startedCall{}
	}
	g.running[key] = startedCall{started: time.Now(), pid: pid}
	g.mu.Unlock()

	done := make(chan T, 1)
	go func() {
		r := call()
		g.mu.Lock()
		delete(g.running, key)
		g.mu.Unlock()
		done <- r
	}()
	return done, nil
}

// inFlight reports whether key's call has started and not returned.
func (g *stuckCalls[T]) inFlight(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.running[key]
	return ok
}
