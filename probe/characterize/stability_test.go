package characterize

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// scripted answers run i with write at writes[i] and read at a steady 100.
func scripted(writes []float64, runs *int) func(context.Context, probe.Request) *probe.Result {
	return func(_ context.Context, req probe.Request) *probe.Result {
		v := writes[min(*runs, len(writes)-1)]
		*runs++
		res := &probe.Result{Target: req.Target, Probe: req.Probe.Name, Kind: req.Probe.Kind, Engine: probe.EngineSync}
		res.Ops = append(res.Ops, probe.OpResult{Op: "write", Bytes: int64(v), Seconds: 1}, probe.OpResult{Op: "read", Bytes: 100, Seconds: 1})
		return res
	}
}

// An op whose runs spread ±40% (a busy neighbour on alternate runs) gets
// no baseline after the runs the limit allows; the steady op does, and
// the error names the op, its spread and what to do.
func TestCharacterizeRefusesAnUnstableOp(t *testing.T) {
	seq := probefixture.SmallSeq("seq")
	tgt := targetWith(t.TempDir(), seq)
	runs := 0
	c := &Characterizer{Run: scripted([]float64{100, 50, 150, 60, 140, 55, 145, 100, 40}, &runs), Hostname: "n", Runs: 3, MaxRuns: 9}
	c.Plan([]ProbeRef{{Target: tgt, Probe: tgt.Probes[0]}})
	m, err := c.Baseline(context.Background(), ProbeRef{Target: tgt, Probe: tgt.Probes[0]})
	if !errors.Is(err, ErrUnstable) {
		t.Fatalf("err = %v, want ErrUnstable", err)
	}
	for _, want := range []string{"write ±", "over 9 runs", "more runs", "quieter node", "larger probe"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if runs != 9 {
		t.Errorf("%d runs, want 9: an unstable op is measured up to MaxRuns", runs)
	}
	if m == nil || m.Entries["write"] != nil || m.Entries["read"] == nil || m.Unstable["write"] <= plateau.StableSpread(0.8) {
		t.Fatalf("measured %+v: want read's baseline alone and write unstable", m)
	}
	// The old write baseline stays on file; read's is replaced.
	b := plateau.NewBaselines()
	old := &plateau.Baseline{Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 77}
	b.Entries[plateau.BaselineKey{Target: tgt.Name, Probe: "seq", Op: "write"}] = old
	b.Replace(m)
	if b.Entries[plateau.BaselineKey{Target: tgt.Name, Probe: "seq", Op: "write"}] != old {
		t.Errorf("the unstable op's baseline on file was dropped")
	}
}

// Noise at the start (a neighbour's job ending) is outvoted by more runs:
// the baseline is written, the median of every run, with its spread.
func TestCharacterizeMeasuresOnUntilStable(t *testing.T) {
	seq := probefixture.SmallSeq("seq")
	tgt := targetWith(t.TempDir(), seq)
	runs := 0
	c := &Characterizer{Run: scripted([]float64{60, 140, 100, 100, 101, 99, 100}, &runs), Hostname: "n", Runs: 3, MaxRuns: 9}
	c.Plan([]ProbeRef{{Target: tgt, Probe: tgt.Probes[0]}})
	m, err := c.Baseline(context.Background(), ProbeRef{Target: tgt, Probe: tgt.Probes[0]})
	if err != nil {
		t.Fatal(err)
	}
	w := m.Entries["write"]
	if w == nil || w.Value != 100 || w.Runs <= 3 || w.Runs >= 9 || w.Spread != plateau.RobustSpread(m.Values["write"]) || w.Spread > plateau.StableSpread(0.8) {
		t.Fatalf("write baseline %+v, want the median 100 of 4 to 8 runs with its robust spread", w)
	}
	if runs != w.Runs {
		t.Errorf("%d runs made, %d in the baseline", runs, w.Runs)
	}
}

func TestStableSpreadFollowsTheWarningRatio(t *testing.T) {
	if got := plateau.StableSpread(0.8); got < 0.0999 || got > 0.1001 {
		t.Errorf("StableSpread(0.8) = %v, want 0.10", got)
	}
	if got := plateau.StableSpread(0.5); got != 0.25 {
		t.Errorf("StableSpread(0.5) = %v, want 0.25", got)
	}
	// One run far off does not move the robust spread; the range does.
	if got := plateau.RobustSpread([]float64{100, 101, 99, 100, 30}); got > 0.02 {
		t.Errorf("RobustSpread with one outlier = %v, want about 0.015", got)
	}
}
