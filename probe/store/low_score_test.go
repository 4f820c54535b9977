package store

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// The target's low score is the median over all its ops, across its
// probes, of their plateau.LowScore: absent until an op has enough runs,
// then, with three ops of two probes scoring far below, a little below and
// above normal, the middle one's score, neither the lowest (one odd op is
// not the node's view of the file system) nor their mean. A target
// without baselines has one too: the score needs no plateau.
func TestStoreTargetLowScoreCombinesOps(t *testing.T) {
	s1, s2, s3 := probefixture.SmallSeq("s"), probefixture.SmallSeq("q"), probefixture.SmallSeq("s")
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{
		{Name: "t", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&s1, &s2}},
		{Name: "u", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&s3}},
	}}, nil)
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	// results keeps what each op was given, to score it the way the
	// daemon must.
	results := map[string][]float64{}
	record := func(target, name string, ops map[string]int64) {
		end = end.Add(time.Minute)
		r := &probe.Result{Target: target, Probe: name, Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end,
			Direct: true, Engine: probe.EngineSync}
		for _, op := range []string{"write", "read"} {
			if b, ok := ops[op]; ok {
				r.Ops = append(r.Ops, probe.OpResult{Op: op, Bytes: b, Operations: 1, Seconds: 1})
				results[target+"/"+name+"/"+op] = append(results[target+"/"+name+"/"+op], float64(b))
			}
		}
		s.Record(r, false)
	}
	// Steady runs wobbling by ±2%: s writes and reads on t, q only writes
	// (three ops in all); u's s writes.
	steady := func(i int) int64 { return int64(100000 * (1 + 0.02*math.Sin(float64(i)))) }
	round := func(i int, sw, sr, qw, uw float64) {
		record("t", "s", map[string]int64{"write": int64(sw * float64(steady(i))), "read": int64(sr * float64(steady(i+1)))})
		record("t", "q", map[string]int64{"write": int64(qw * float64(steady(i+2)))})
		record("u", "s", map[string]int64{"write": int64(uw * float64(steady(i+3)))})
	}
	const name = "plateau_probe_target_low_score"
	firstScored := plateau.MinNormalRuns + plateau.ScoreRuns
	for i := 0; i < firstScored-1; i++ {
		round(i, 1, 1, 1, 1)
	}
	if n := testutil.CollectAndCount(s, name); n != 0 {
		t.Fatalf("%d series of %s after %d runs, want none before %d", n, name, firstScored-1, firstScored)
	}
	round(firstScored-1, 1, 1, 1, 1)
	if n := testutil.CollectAndCount(s, name); n != 2 {
		t.Fatalf("%d series of %s after %d runs, want one for each of t and u", n, name, firstScored)
	}
	for i := firstScored; i < 40; i++ {
		round(i, 1, 1, 1, 1)
	}
	// The last run: t's s write 30% down (far below, at the bound),
	// q's write 3% down (a little), s's read 30% up (above normal, at the bound).
	for i := 40; i < 40+plateau.ScoreRuns; i++ {
		round(i, 0.7, 1.3, 0.97, 1)
	}
	score := func(key string) float64 {
		t.Helper()
		v, ok := plateau.LowScore(results[key])
		if !ok {
			t.Fatalf("no low score for %s after %d runs", key, len(results[key]))
		}
		return v
	}
	low, middle, high := score("t/s/write"), score("t/q/write"), score("t/s/read")
	if !(low < middle && middle < high) || low != -plateau.ScoreBound {
		t.Fatalf("the op scores are %g, %g, %g: want the bound %d, then a higher and a yet higher one",
			low, middle, high, -plateau.ScoreBound)
	}
	want := (low + middle + high) / math.Sqrt(3)
	if math.Abs(want-middle) < 0.1 || math.Abs(want-low) < 0.1 {
		t.Fatalf("the combined score %g is as good as the median %g or the minimum %g: the test would not tell them apart", want, middle, low)
	}
	got := probetest.MetricValue(t, s, name, map[string]string{"target": "t"})
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("%s{t} = %g, want the op scores %g, %g, %g added up over √3, %g", name, got, low, middle, high, want)
	}
	if got, want := probetest.MetricValue(t, s, name, map[string]string{"target": "u"}), score("u/s/write"); got != want {
		t.Errorf("%s{u} = %g, want its one op's score %g", name, got, want)
	}
	// Beside the score, the size of the drop: the lowest op's latest run
	// over its normal, here s's write 30% down, about 0.7 (not the read,
	// 30% up, nor a mean of the three).
	ratio := func(key string) float64 {
		t.Helper()
		v, ok := plateau.NormalRatio(results[key])
		if !ok {
			t.Fatalf("no normal ratio for %s", key)
		}
		return v
	}
	const ratioName = "plateau_probe_target_normal_ratio"
	if got, want := probetest.MetricValue(t, s, ratioName, map[string]string{"target": "t"}), ratio("t/s/write"); got != want || want > 0.72 || want < 0.68 {
		t.Errorf("%s{t} = %g, want the lowest op's, t/s/write's %g, about 0.7", ratioName, got, want)
	}
	if got, want := probetest.MetricValue(t, s, ratioName, map[string]string{"target": "u"}), ratio("u/s/write"); got != want {
		t.Errorf("%s{u} = %g, want its one op's %g", ratioName, got, want)
	}
	// The help says what the value is, for whoever reads /metrics.
	help := `# HELP plateau_probe_target_low_score Combined low score of the target's ops in robust deviations from normal, bounded to ±4.
# TYPE plateau_probe_target_low_score gauge
`
	var exposition strings.Builder
	exposition.WriteString(help)
	for _, target := range []string{"t", "u"} {
		exposition.WriteString(`plateau_probe_target_low_score{target="` + target + `"} ` +
			strconv.FormatFloat(probetest.MetricValue(t, s, name, map[string]string{"target": target}), 'g', -1, 64) + "\n")
	}
	if err := testutil.CollectAndCompare(s, strings.NewReader(exposition.String()), name); err != nil {
		t.Error(err)
	}
	// A failing run of s takes its two ops' scores away: t's score is then
	// q's alone.
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Reason: probe.ReasonEIO}, false)
	if got := probetest.MetricValue(t, s, name, map[string]string{"target": "t"}); got != middle {
		t.Errorf("%s{t} = %g while s fails, want q's score %g", name, got, middle)
	}
	if got, want := probetest.MetricValue(t, s, ratioName, map[string]string{"target": "t"}), ratio("t/q/write"); got != want {
		t.Errorf("%s{t} = %g while s fails, want q's %g", ratioName, got, want)
	}
}
