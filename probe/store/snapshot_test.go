package store

import (
	"slices"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// A snapshot holds what /metrics shows, verdicts by Compare, and stays as
// it was taken while the store goes on recording.
func TestSnapshotCopiesWhatMetricsShow(t *testing.T) {
	b, err := plateau.ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	p, md := probefixture.SmallSeq("s"), probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 1, Files: 8, Interval: time.Minute}
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{
		{Name: "u", Probes: []*probe.ProbeConfig{&md}},
		{Name: "t", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&p}},
	}}, b)
	end := time.Unix(1_700_000_000, 0)
	run := &probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end, Direct: true, Engine: probe.EngineSync,
		Ops: []probe.OpResult{{Op: "write", Bytes: 200, Operations: 2, Seconds: 1}, {Op: "read", Bytes: 2000, Operations: 2, Seconds: 1}}}
	s.Record(run, false)
	s.RecordSkip("t", "s", probe.SkipOverlap)
	s.SetAbandoned("u", 2)

	snap := s.Snapshot()
	if len(snap.Probes) != 2 || snap.Probes[0].Target != "t" || snap.Probes[1].Target != "u" {
		t.Fatalf("probes not sorted by target: %+v", snap.Probes)
	}
	if len(snap.Targets) != 2 || snap.Target("u").Abandoned != 2 || snap.Target("t").Abandoned != 0 {
		t.Errorf("targets: %+v", snap.Targets)
	}
	ps := snap.Probe("t", "s")
	if ps.Last == nil || ps.Last != ps.LastSuccess || ps.Interval != time.Minute || ps.Params != plateau.ProbeParams(&p) {
		t.Fatalf("probe: %+v", ps)
	}
	if ps.Runs[ResultSuccess] != 1 || ps.Runs[ResultSkipped] != 1 || ps.Skips[probe.SkipOverlap] != 1 || ps.Errors[probe.ReasonEIO] != 0 {
		t.Errorf("counters: runs %v, skips %v, errors %v", ps.Runs, ps.Skips, ps.Errors)
	}
	// The verdicts are Compare's: write 200/1000 is critical, read ok.
	want := s.probes[probeKey{"t", "s"}].plateau.Compare(run)
	if len(ps.Verdicts) != 2 || ps.Verdicts[0] != want[0] || ps.Verdicts[1] != want[1] ||
		ps.Verdicts[0].Verdict != plateau.VerdictCritical || ps.Verdicts[1].Verdict != plateau.VerdictOK {
		t.Errorf("verdicts %+v, want %+v", ps.Verdicts, want)
	}
	if got := probetest.MetricValue(t, s, "plateau_probe_ratio", map[string]string{"op": "write"}); got != ps.Verdicts[0].Ratio {
		t.Errorf("snapshot ratio %v, plateau_probe_ratio %v", ps.Verdicts[0].Ratio, got)
	}
	if len(ps.Ops) != 2 || ps.Ops[0].Op != "write" || !slices.Equal(ps.Ops[0].History, []float64{200}) || ps.Ops[0].HasChange {
		t.Errorf("ops: %+v", ps.Ops)
	}

	// The store goes on; the snapshot does not move.
	run.Ops[0].Bytes = 1
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, End: end.Add(time.Minute), Reason: probe.ReasonEIO, Error: "eio"}, false)
	s.SetAbandoned("u", 0)
	if ps.LastSuccess.Ops[0].Bytes != 200 || ps.Runs[ResultFailure] != 0 || snap.Target("u").Abandoned != 2 || len(ps.Ops[0].History) != 1 {
		t.Errorf("the snapshot changed after it was taken: %+v", ps)
	}
	after := s.Snapshot().Probe("t", "s")
	if after.Last == after.LastSuccess || after.Last.Reason != probe.ReasonEIO || len(after.Verdicts) != 1 || after.Verdicts[0].Verdict != plateau.VerdictFailed {
		t.Errorf("after a failure: last %+v, verdicts %+v", after.Last, after.Verdicts)
	}
}

// The change ratio is in a snapshot exactly when /metrics exports it:
// enough history, and the last run successful.
func TestSnapshotChangeRatioAsMetrics(t *testing.T) {
	s, _ := storeWithProbe()
	end := time.Unix(1_700_000_000, 0)
	record := func(i int, fail bool) {
		r := &probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, End: end.Add(time.Duration(i) * time.Minute),
			Ops: []probe.OpResult{{Op: "write", Bytes: 1000 + int64(i%3), Operations: 1, Seconds: 1}}}
		if fail {
			r.Ops, r.Reason, r.Error = nil, probe.ReasonEIO, "eio"
		}
		s.Record(r, false)
	}
	for i := range minChangeRuns - 1 {
		record(i, false)
	}
	if s.Snapshot().Probe("t", "s").Ops[0].HasChange {
		t.Fatalf("change ratio with %d runs, before %d", minChangeRuns-1, minChangeRuns)
	}
	record(minChangeRuns, false)
	op := s.Snapshot().Probe("t", "s").Ops[0]
	got := probetest.MetricValue(t, s, "plateau_probe_change_ratio", map[string]string{"op": "write"})
	if !op.HasChange || op.Change.Ratio != got {
		t.Fatalf("snapshot change %+v (has %v), plateau_probe_change_ratio %v", op.Change, op.HasChange, got)
	}
	// The read op was not measured: no change ratio for it.
	if s.Snapshot().Probe("t", "s").Ops[1].HasChange {
		t.Error("change ratio for an op the runs did not measure")
	}
	record(minChangeRuns+1, true)
	if s.Snapshot().Probe("t", "s").Ops[0].HasChange {
		t.Error("change ratio after a failed run, which /metrics does not export")
	}
}

// Snapshots are taken while probes record (run with -race): the page
// reads while the scheduler writes.
func TestSnapshotWhileRecording(t *testing.T) {
	s, _ := storeWithProbe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, End: time.Unix(int64(1_700_000_000+i), 0),
				Ops: []probe.OpResult{{Op: "write", Bytes: 1000, Operations: 1, Seconds: 1}}}, false)
			s.SetInProgress("t", "s", i%2 == 0)
		}
	}()
	for {
		select {
		case <-done:
			if n := s.Snapshot().Probe("t", "s").Runs[ResultSuccess]; n != 200 {
				t.Fatalf("%d successes after 200 runs", n)
			}
			return
		default:
			snap := s.Snapshot()
			if p := snap.Probe("t", "s"); p.Last != nil && len(p.Ops[0].History) == 0 {
				t.Fatal("a snapshot with a last run but no history")
			}
		}
	}
}
