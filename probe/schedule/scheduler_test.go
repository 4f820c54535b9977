package schedule

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

func TestSlotOffsetSpreadsAFleet(t *testing.T) {
	const interval = 15 * time.Minute
	buckets := make([]int, 10)
	for i := 0; i < 5000; i++ {
		off := SlotOffset(fmt.Sprintf("node%04d", i), "scratch", "seq", interval)
		if off < 0 || off >= interval {
			t.Fatalf("offset %s outside [0, %s)", off, interval)
		}
		buckets[off*10/interval]++
	}
	// 500 expected per bucket; a thundering herd would pile into few.
	for i, n := range buckets {
		if n < 400 || n > 600 {
			t.Errorf("bucket %d holds %d of 5000 nodes; offsets are not spread: %v", i, n, buckets)
		}
	}
	// A restart must keep a node's slot: the offset depends on nothing else.
	if a, b := SlotOffset("a", "t", "p", interval), SlotOffset("a", "t", "p", time.Duration(int64(interval))); a != b {
		t.Errorf("offset is not stable across calls: %s, %s", a, b)
	}
	if SlotOffset("a", "t", "p", interval) == SlotOffset("a", "t", "q", interval) {
		t.Error("two probes of one host share a slot")
	}
}

func TestNextSlot(t *testing.T) {
	interval := 30 * time.Second
	for _, offset := range []time.Duration{0, time.Second, 29*time.Second + 999*time.Millisecond} {
		for _, now := range []time.Time{time.Unix(1_700_000_000, 0), time.Unix(1_700_000_001, 5), time.Unix(1_700_000_029, 999)} {
			s := NextSlot(now, offset, interval)
			if s.Before(now) || s.Sub(now) >= interval {
				t.Errorf("NextSlot(%v, %s) = %v: not within one interval after now", now, offset, s)
			}
			if (s.UnixNano()-int64(offset))%int64(interval) != 0 {
				t.Errorf("NextSlot(%v, %s) = %v is not on the offset grid", now, offset, s)
			}
		}
	}
	on := time.Unix(1_699_999_990, 0) // 1_699_999_980 is a multiple of 30 s
	if !NextSlot(on, 10*time.Second, interval).Equal(on) {
		t.Error("an instant on the grid must be its own slot")
	}
}

// slowRunner stands for a slow file system: the real probe runs, then the
// run takes extra time, so slots pass while it goes on.
type slowRunner struct{ delay time.Duration }

func (s slowRunner) Run(ctx context.Context, req probe.Request) worker.Outcome {
	out := worker.InProcessRunner{}.Run(ctx, req)
	time.Sleep(s.delay)
	return out
}

func scheduleOne(t *testing.T, runner worker.Runner, target *probe.Target) *store.Store {
	t.Helper()
	return scheduleOneWith(t, Options{Runner: runner}, target)
}

// scheduleOneWith schedules target with o, its logger, host name and
// reporter filled in, and returns the store it reports to.
func scheduleOneWith(t *testing.T, o Options, target *probe.Target) *store.Store {
	t.Helper()
	results := store.New()
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	o.Hostname, o.Reporter = "node1", results
	s := New(o)
	cfg := &probe.Config{Targets: []*probe.Target{target}}
	results.Configure(cfg, nil)
	s.Apply(cfg)
	t.Cleanup(s.Stop)
	return results
}

// fallbackRunner runs the real probe and reports the goroutine engine from
// its third successful run on, as the random probe does once io_setup
// starts failing. Counting successes keeps two sync runs before the change
// even when a slow machine makes a run time out.
type fallbackRunner struct{ successes *atomic.Int32 }

func (f fallbackRunner) Run(ctx context.Context, req probe.Request) worker.Outcome {
	out := worker.InProcessRunner{}.Run(ctx, req)
	if out.Result != nil && out.Result.OK() && f.successes.Add(1) >= 3 {
		out.Result.Engine = probe.EngineGoroutines
	}
	return out
}

// A change of I/O mode is logged once, when it happens, not on every run.
func TestSchedulerLogsAChangeOfIOModeOnce(t *testing.T) {
	p := probefixture.SmallSeq("s")
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	var logs probetest.LogBuffer
	results := store.New()
	s := New(Options{Logger: log.NewLogfmtLogger(&logs), Hostname: "node1", Runner: fallbackRunner{successes: new(atomic.Int32)}, Reporter: results})
	results.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Path: t.TempDir(), Probes: []*probe.ProbeConfig{&p}}}}, nil)
	s.Apply(&probe.Config{Targets: []*probe.Target{{Name: "t", Path: t.TempDir(), Probes: []*probe.ProbeConfig{&p}}}})
	t.Cleanup(s.Stop)
	probetest.WaitUntil(t, "five successful runs", 60*time.Second, func() bool {
		return probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": store.ResultSuccess}) >= 5
	})
	s.Stop()
	changes := strings.Count(logs.String(), `msg="probe I/O mode changed"`)
	if changes != 1 || !strings.Contains(logs.String(), "engine=goroutines was_direct=") || !strings.Contains(logs.String(), "was_engine=sync") {
		t.Fatalf("%d mode-change lines, want one from sync to goroutines:\n%s", changes, logs.String())
	}
}

func TestSchedulerSkipsAndCountsOverlappingSlots(t *testing.T) {
	p := probefixture.SmallSeq("s")
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	results := scheduleOne(t, slowRunner{delay: 2500 * time.Millisecond}, &probe.Target{Name: "t", Path: t.TempDir(), Probes: []*probe.ProbeConfig{&p}})
	runs := func(result string) float64 {
		return probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": result})
	}
	probetest.WaitUntil(t, "two runs", 30*time.Second, func() bool { return runs(store.ResultSuccess) >= 2 })
	overlap := probetest.MetricValue(t, results, "plateau_probe_skips_total", map[string]string{"reason": probe.SkipOverlap})
	// Each run holds ~3 one-second slots, so at least two were skipped per run.
	if overlap < 2 || runs(store.ResultSkipped) < overlap {
		t.Fatalf("overlapping slots: skips{overlap}=%v runs{skipped}=%v, want >= 2 each", overlap, runs(store.ResultSkipped))
	}
}

func TestSchedulerEnforcesByteBudget(t *testing.T) {
	p := probefixture.SmallSeq("s") // 2 workers x 1 MiB, written and read: 4 MiB a run
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	tg := &probe.Target{Name: "t", Path: t.TempDir(), MaxBytesPerHour: 6 << 20, Probes: []*probe.ProbeConfig{&p}}
	results := scheduleOne(t, worker.InProcessRunner{}, tg)
	probetest.WaitUntil(t, "a budget skip", 30*time.Second, func() bool {
		return probetest.MetricValue(t, results, "plateau_probe_skips_total", map[string]string{"reason": probe.SkipBudget}) >= 2
	})
	if got := probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": store.ResultSuccess}); got != 1 {
		t.Fatalf("%v runs succeeded; a 6 MiB budget allows exactly one 4 MiB run per hour", got)
	}
	if got := probetest.MetricValue(t, results, "plateau_probe_io_bytes_total", map[string]string{"op": "write"}); got != 2<<20 {
		t.Fatalf("io_bytes_total{op=write} = %v, want %d", got, 2<<20)
	}
}

// stuckRunner stands for a worker in uninterruptible sleep: its run is
// reported timed out and Stuck until release is closed.
type stuckRunner struct {
	runs    atomic.Int32
	release chan struct{}
}

func (s *stuckRunner) Run(ctx context.Context, req probe.Request) worker.Outcome {
	s.runs.Add(1)
	r := &probe.Result{Target: req.Target, Probe: req.Probe.Name, Kind: req.Probe.Kind, Start: time.Now(), End: time.Now()}
	r.Fail(fmt.Errorf("probe %s/%s: %w", req.Target, req.Probe.Name, context.DeadlineExceeded))
	return worker.Outcome{Result: r, TimedOut: true, Stuck: s.release}
}

// A worker that survives SIGKILL closes its target: later slots are
// skipped as target_hung, without a second worker on the dead mount, until
// it exits; the scheduler reports the count and the target opens again.
func TestStuckWorkerClosesTargetUntilItExits(t *testing.T) {
	p := probefixture.SmallSeq("s")
	p.Interval, p.Timeout, p.Splay = time.Second, 500*time.Millisecond, false
	runner := &stuckRunner{release: make(chan struct{})}
	results := scheduleOne(t, runner, &probe.Target{Name: "t", Path: t.TempDir(), Probes: []*probe.ProbeConfig{&p}})
	hungSkips := func() float64 {
		return probetest.MetricValue(t, results, "plateau_probe_skips_total", map[string]string{"reason": probe.SkipTargetHung})
	}
	probetest.WaitUntil(t, "two slots skipped as target_hung", 60*time.Second, func() bool { return hungSkips() >= 2 })
	if n := runner.runs.Load(); n != 1 {
		t.Fatalf("%d runs started while a worker of the target was stuck, want 1", n)
	}
	if v := probetest.MetricValue(t, results, "plateau_probe_hung", nil); v != 1 {
		t.Fatalf("plateau_probe_hung = %v while the worker is stuck, want 1", v)
	}
	close(runner.release)
	probetest.WaitUntil(t, "the target to open again", 60*time.Second, func() bool { return runner.runs.Load() >= 2 })
	// Later runs' workers "exit" at once (release is closed), so the
	// count settles at 0.
	probetest.WaitUntil(t, "no abandoned worker left", 60*time.Second, func() bool {
		return probetest.MetricValue(t, results, "plateau_probe_abandoned_workers", nil) == 0 &&
			probetest.MetricValue(t, results, "plateau_probe_hung", nil) == 0
	})
}
