package probe

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/plateau-exporter/plateau_exporter/probe/probetest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

func (s slowRunner) Run(ctx context.Context, req Request) Outcome {
	out := InProcessRunner{}.Run(ctx, req)
	time.Sleep(s.delay)
	return out
}

func scheduleOne(t *testing.T, runner Runner, target *Target) *Store {
	t.Helper()
	store := NewStore()
	s := NewScheduler(log.NewNopLogger(), "node1", runner, store)
	s.Apply(&Config{Targets: []*Target{target}}, nil)
	t.Cleanup(s.Stop)
	return store
}

func counterValue(t *testing.T, c prometheus.Collector, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == k && lp.GetValue() == v {
			return true
		}
	}
	return false
}

// fallbackRunner runs the real probe and reports the goroutine engine from
// its third successful run on, as the random probe does once io_setup
// starts failing. Counting successes keeps two sync runs before the change
// even when a slow machine makes a run time out.
type fallbackRunner struct{ successes *atomic.Int32 }

func (f fallbackRunner) Run(ctx context.Context, req Request) Outcome {
	out := InProcessRunner{}.Run(ctx, req)
	if out.Result != nil && out.Result.OK() && f.successes.Add(1) >= 3 {
		out.Result.Engine = engineGoroutines
	}
	return out
}

// A change of I/O mode is logged once, when it happens, not on every run.
func TestSchedulerLogsAChangeOfIOModeOnce(t *testing.T) {
	p := smallSeq("s")
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	var logs probetest.LogBuffer
	store := NewStore()
	s := NewScheduler(log.NewLogfmtLogger(&logs), "node1", fallbackRunner{successes: new(atomic.Int32)}, store)
	s.Apply(&Config{Targets: []*Target{{Name: "t", Path: t.TempDir(), Probes: []*ProbeConfig{&p}}}}, nil)
	t.Cleanup(s.Stop)
	probetest.WaitUntil(t, "five successful runs", 60*time.Second, func() bool {
		return counterValue(t, store, "plateau_probe_runs_total", map[string]string{"result": ResultSuccess}) >= 5
	})
	s.Stop()
	changes := strings.Count(logs.String(), `msg="probe I/O mode changed"`)
	if changes != 1 || !strings.Contains(logs.String(), "engine=goroutines was_direct=") || !strings.Contains(logs.String(), "was_engine=sync") {
		t.Fatalf("%d mode-change lines, want one from sync to goroutines:\n%s", changes, logs.String())
	}
}

func TestSchedulerSkipsAndCountsOverlappingSlots(t *testing.T) {
	p := smallSeq("s")
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	store := scheduleOne(t, slowRunner{delay: 2500 * time.Millisecond}, &Target{Name: "t", Path: t.TempDir(), Probes: []*ProbeConfig{&p}})
	runs := func(result string) float64 {
		return counterValue(t, store, "plateau_probe_runs_total", map[string]string{"result": result})
	}
	probetest.WaitUntil(t, "two runs", 30*time.Second, func() bool { return runs(ResultSuccess) >= 2 })
	overlap := counterValue(t, store, "plateau_probe_skips_total", map[string]string{"reason": SkipOverlap})
	// Each run holds ~3 one-second slots, so at least two were skipped per run.
	if overlap < 2 || runs(ResultSkipped) < overlap {
		t.Fatalf("overlapping slots: skips{overlap}=%v runs{skipped}=%v, want >= 2 each", overlap, runs(ResultSkipped))
	}
}

func TestSchedulerEnforcesByteBudget(t *testing.T) {
	p := smallSeq("s") // 2 workers x 1 MiB, written and read: 4 MiB a run
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	tg := &Target{Name: "t", Path: t.TempDir(), MaxBytesPerHour: 6 << 20, Probes: []*ProbeConfig{&p}}
	store := scheduleOne(t, InProcessRunner{}, tg)
	probetest.WaitUntil(t, "a budget skip", 30*time.Second, func() bool {
		return counterValue(t, store, "plateau_probe_skips_total", map[string]string{"reason": SkipBudget}) >= 2
	})
	if got := counterValue(t, store, "plateau_probe_runs_total", map[string]string{"result": ResultSuccess}); got != 1 {
		t.Fatalf("%v runs succeeded; a 6 MiB budget allows exactly one 4 MiB run per hour", got)
	}
	if got := counterValue(t, store, "plateau_probe_io_bytes_total", map[string]string{"op": "write"}); got != 2<<20 {
		t.Fatalf("io_bytes_total{op=write} = %v, want %d", got, 2<<20)
	}
}
