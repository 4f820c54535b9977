package plateau

import (
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// The verdict never calls critical a ratio the baseline's own spread makes
// likely: a metadata baseline of runs spread ±33% (a busy node) cannot page
// for a run at 0.39 of it. A baseline steady enough for characterize to
// write keeps the target's ratios.
func TestCompareHeedsTheBaselinesSpread(t *testing.T) {
	pl := Plateau{Kind: probe.KindMetadata, Warning: 0.8, Critical: 0.5, Baselines: map[string]*Baseline{}}
	for _, tc := range []struct {
		spread, ratio float64
		want          string
	}{
		{0, 0.39, VerdictCritical},    // hand-written: the target's ratios
		{0.10, 0.39, VerdictCritical}, // steady enough to be written: a real drop
		{0.10, 0.79, VerdictWarning},
		{0.10, 0.11, VerdictCritical}, // a baseline 10x too high
		{0.05, 0.9, VerdictOK},
		{0.33, 0.39, VerdictOK},       // within two of its runs' deviations
		{0.15, 0.45, VerdictWarning},  // below 1 - 2 x 0.15, not 1 - 4 x 0.15
		{0.15, 0.35, VerdictCritical}, // below 1 - 4 x 0.15
		{0.15, 0.75, VerdictOK},
	} {
		pl.Baselines["create"] = &Baseline{Kind: probe.KindMetadata, Unit: probe.UnitOpsPerSecond, Value: 1000, Spread: tc.spread}
		r := &probe.Result{Kind: probe.KindMetadata, Ops: []probe.OpResult{{Op: "create", Operations: int64(1000 * tc.ratio), Seconds: 1}}}
		v := pl.Compare(r)
		if len(v) != 1 || v[0].Verdict != tc.want {
			t.Errorf("spread %.2f ratio %.2f: verdict %+v, want %s", tc.spread, tc.ratio, v, tc.want)
		}
	}
}
