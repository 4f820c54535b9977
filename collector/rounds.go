package collector

// Reads that can block in the kernel (a Lustre parameter file of an evicted
// client) run in rounds in the background; a scrape exports the last round
// that finished and never waits for a read, except for the first round
// after start, which it waits for at most the round's timeout.

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// roundFlags are a background collector's --collector.NAME.interval and
// --collector.NAME.timeout: how often its round runs, and how long one
// may take. Each such collector declares them with declareRoundFlags, so
// the two are named, and say what they do, the same way everywhere.
type roundFlags struct {
	interval, timeout *time.Duration
}

// roundFlagsSpec is what one collector's round flags say and default to.
type roundFlagsSpec struct {
	name                      string // NAME in --collector.NAME.interval
	intervalHelp, timeoutHelp string
	interval, timeout         string // defaults, as durations
}

func declareRoundFlags(s roundFlagsSpec) roundFlags {
	return roundFlags{
		interval: kingpin.Flag("collector."+s.name+".interval", s.intervalHelp).Default(s.interval).Duration(),
		timeout:  kingpin.Flag("collector."+s.name+".timeout", s.timeoutHelp).Default(s.timeout).Duration(),
	}
}

// backgroundRounds runs round every interval from the first latest call
// until Close, and keeps what the last one returned.
type backgroundRounds[R any] struct {
	interval, timeout time.Duration
	round             func() R

	mu        sync.Mutex
	last      R
	done      bool // a round has finished
	ready     chan struct{}
	readyOnce sync.Once
	startOnce sync.Once
	stop      chan struct{}
	stopOnce  sync.Once
	loop      sync.WaitGroup
}

func newBackgroundRounds[R any](interval, timeout time.Duration, round func() R) *backgroundRounds[R] {
	return &backgroundRounds[R]{interval: interval, timeout: timeout, round: round, ready: make(chan struct{}), stop: make(chan struct{})}
}

// latest starts the rounds on its first call and waits for the first one
// for at most the timeout and a second; it returns the last finished
// round, or false when none has finished yet.
func (b *backgroundRounds[R]) latest() (R, bool) {
	b.startOnce.Do(b.start)
	first := time.NewTimer(b.timeout + time.Second)
	defer first.Stop()
	select {
	case <-b.ready:
	case <-first.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last, b.done
}

// publish makes r the last finished round.
func (b *backgroundRounds[R]) publish(r R) {
	b.mu.Lock()
	b.last, b.done = r, true
	b.mu.Unlock()
	b.readyOnce.Do(func() { close(b.ready) })
}

func (b *backgroundRounds[R]) start() {
	b.loop.Add(1)
	go func() {
		defer b.loop.Done()
		ticker := time.NewTicker(b.interval)
		defer ticker.Stop()
		for {
			b.publish(b.round())
			select {
			case <-ticker.C:
			case <-b.stop:
				return
			}
		}
	}()
}

// Close stops the rounds and waits for the one in progress, which its
// deadline bounds; reads still blocked in the kernel return on their own.
// It never fails: the error is the one a collector's Close returns.
func (b *backgroundRounds[R]) Close() error {
	b.startOnce.Do(func() {})
	b.stopOnce.Do(func() { close(b.stop) })
	b.loop.Wait()
	return nil
}

// exportLatest sends the metrics of the last complete round to ch, what a
// background collector's Update does once its subject is present: the
// first call starts the rounds and waits for the first, later ones never
// wait for a read. name is the collector's, for the error while no round
// has finished.
func exportLatest[R any](ch chan<- prometheus.Metric, rounds *backgroundRounds[R], name string, metrics func(R) []prometheus.Metric) error {
	last, ok := rounds.latest()
	if !ok {
		return fmt.Errorf("%s: no round has finished yet", name)
	}
	for _, m := range metrics(last) {
		ch <- m
	}
	return nil
}

// errorChange remembers the last failure a background collector logged, so
// that one repeated every round is logged when it starts and when it
// changes, not 240 times an hour.
type errorChange struct {
	mu   sync.Mutex
	last string
}

// changed records err, nil for a success, and reports whether it is a
// failure that differs from the last one recorded.
func (e *errorChange) changed(err error) bool {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	changed := msg != e.last
	e.last = msg
	return changed && err != nil
}

// awaitGuarded runs call under the guard for key and waits for it until
// ctx ends; fail makes the result of a call that could not start or did
// not return in time. Past the deadline nothing new starts, and a call
// still running from an earlier round is not started again.
func awaitGuarded[T any](ctx context.Context, g *stuckCalls[T], key string, call func() T, timedOut error, fail func(error) T) T {
	if ctx.Err() != nil {
		return fail(fmt.Errorf("%s: %w", key, timedOut))
	}
	done, err := g.start(key, nil, call)
	if err != nil {
		return fail(err)
	}
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		select {
		case r := <-done: // it returned just as the deadline passed
			return r
		default:
		}
		return fail(fmt.Errorf("%s: %w", key, timedOut))
	}
}

// readEach calls read for every item, at most workers at once, and returns
// when all have returned: a round reads its targets so, so that one read
// blocked in the kernel does not hold up the others, and an evicted
// client adds at most workers stuck reads per round.
func readEach[T any](items []T, workers int, read func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				read(t)
			}
		}()
	}
	for _, t := range items {
		work <- t
	}
	close(work)
	wg.Wait()
}

// lustreDirs lists the directories (or links to them) named kind/<name>
// under any of roots, each name once, sorted: a Lustre device is in the
// first tree of sysfs, procfs and debugfs that has it, and may be in more.
func lustreDirs(roots []string, kind string) []string {
	seen := map[string]bool{}
	var names []string
	for _, root := range roots {
		entries, err := os.ReadDir(filepath.Join(root, kind))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if n := e.Name(); !seen[n] && (e.IsDir() || e.Type()&fs.ModeSymlink != 0) {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}
