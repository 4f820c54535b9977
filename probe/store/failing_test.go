package store

import (
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// TestFailingAndNotRun checks plateau_probe_failing and
// plateau_probe_not_run against the conditions PlateauProbeFailing and
// PlateauProbeNotRun had in PromQL: failing once the last success is more
// than two intervals old with the last run failed, or after two failures
// without any success; not run once the last run is more than three
// intervals old, or after three skips without any run.
func TestFailingAndNotRun(t *testing.T) {
	now := time.Now()
	value := func(s *Store, name string) float64 {
		t.Helper()
		return probetest.MetricValue(t, s, name, map[string]string{"probe": "s"})
	}
	ok := func(end time.Time) *probe.Result {
		return &probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end,
			Ops: []probe.OpResult{{Op: "write", Bytes: 1000, Operations: 10, Seconds: 2}}}
	}
	bad := func(end time.Time) *probe.Result {
		return &probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end, Reason: probe.ReasonEIO, Error: "eio"}
	}
	s, _ := storeWithProbe()
	if value(s, "plateau_probe_failing") != 0 || value(s, "plateau_probe_not_run") != 0 {
		t.Fatal("a probe that has not run yet is failing or not run")
	}
	for i := 0; i < notRunSkips; i++ {
		if got := value(s, "plateau_probe_not_run"); got != 0 {
			t.Fatalf("not run after %d skips", i)
		}
		s.RecordSkip("t", "s", "budget")
	}
	if got := value(s, "plateau_probe_not_run"); got != 1 {
		t.Fatalf("not_run = %v after %d skips without a run, want 1", got, notRunSkips)
	}
	// One failure without a success: not yet; two: failing.
	s.Record(bad(now), false)
	if value(s, "plateau_probe_failing") != 0 || value(s, "plateau_probe_not_run") != 0 {
		t.Fatal("one failed run: failing, or still not run")
	}
	s.Record(bad(now), true) // a timeout counts as a failure
	if got := value(s, "plateau_probe_failing"); got != 1 {
		t.Fatalf("failing = %v after a failure and a timeout without a success, want 1", got)
	}

	// With a success: failing once it is more than two intervals old.
	s, p := storeWithProbe()
	interval := p.Interval
	lastOK := now.Add(-2*interval + 5*time.Second)
	s.Record(ok(lastOK), false)
	s.Record(bad(now.Add(-time.Second)), false)
	if got := value(s, "plateau_probe_failing"); got != 0 {
		t.Fatalf("failing = %v with a success %s ago, want 0", got, now.Sub(lastOK))
	}
	s, _ = storeWithProbe()
	lastOK = now.Add(-2*interval - 5*time.Second)
	s.Record(ok(lastOK), false)
	s.Record(bad(now.Add(-time.Second)), false)
	if got := value(s, "plateau_probe_failing"); got != 1 {
		t.Fatalf("failing = %v with the last success %s ago and the last run failed, want 1", got, now.Sub(lastOK))
	}
	// The same success age with the last run successful is not failing.
	s, _ = storeWithProbe()
	s.Record(ok(lastOK), false)
	if got := value(s, "plateau_probe_failing"); got != 0 {
		t.Fatalf("failing = %v with the last run successful, want 0", got)
	}
	// ... but not run, once it is more than three intervals old.
	if got := value(s, "plateau_probe_not_run"); got != 0 {
		t.Fatalf("not_run = %v with the last run %s ago, want 0", got, now.Sub(lastOK))
	}
	s, _ = storeWithProbe()
	s.Record(ok(now.Add(-3*interval-5*time.Second)), false)
	if got := value(s, "plateau_probe_not_run"); got != 1 {
		t.Fatalf("not_run = %v with the last run over three intervals ago, want 1", got)
	}
}
