package store

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

func TestStoreExportsRatioAgainstBaseline(t *testing.T) {
	b, _ := plateau.ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
	p := probefixture.SmallSeq("s")
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&p}}}}, b)
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, End: time.Now(), Direct: true, Engine: probe.EngineSync,
		Ops: []probe.OpResult{{Op: "write", Bytes: 500, Operations: 2, Seconds: 1}, {Op: "read", Bytes: 3000, Operations: 2, Seconds: 1}}}, false)
	want := `
# HELP plateau_alert_threshold_ratio Ratio to baseline below which the probe's results are a warning or critical regression.
# TYPE plateau_alert_threshold_ratio gauge
plateau_alert_threshold_ratio{probe="s",severity="critical",target="t"} 0.5
plateau_alert_threshold_ratio{probe="s",severity="warning",target="t"} 0.8
# HELP plateau_baseline_throughput_bytes_per_second The op's plateau: throughput the same probe reached on a known-good system, in bytes per second.
# TYPE plateau_baseline_throughput_bytes_per_second gauge
plateau_baseline_throughput_bytes_per_second{kind="sequential",op="read",probe="s",target="t"} 2000
plateau_baseline_throughput_bytes_per_second{kind="sequential",op="write",probe="s",target="t"} 1000
# HELP plateau_probe_ratio Last successful result of the op divided by its baseline (1 = at plateau).
# TYPE plateau_probe_ratio gauge
plateau_probe_ratio{kind="sequential",op="read",probe="s",target="t"} 1.5
plateau_probe_ratio{kind="sequential",op="write",probe="s",target="t"} 0.5
`
	compareSeries(t, s, want, "plateau_probe_ratio", "plateau_baseline_throughput_bytes_per_second", "plateau_alert_threshold_ratio")
	// Without baselines the ratio is absent, not 0 or +Inf.
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{&p}}}}, nil)
	if n := testutil.CollectAndCount(s, "plateau_probe_ratio"); n != 0 {
		t.Fatalf("%d ratios exported without baselines", n)
	}
}

// A baseline measured with libaio and O_DIRECT says nothing about a run
// that fell back to goroutines or to the page cache: such a run gets no
// ratio, so it can neither raise nor hide a below-plateau alert, and the
// mismatch gauge says why the ratio is gone.
func TestStoreComparesOnlyRunsOfTheBaselinesIOMode(t *testing.T) {
	b, err := plateau.ParseBaselines([]byte("targets:\n  t:\n    r:\n      kind: random\n      direct: true\n      engine: libaio\n      ops:\n        read: {operations_per_second: 1000}\n        write: {operations_per_second: 1000}\n"), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := probe.ProbeConfig{Name: "r", Kind: probe.KindRandom}
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{&p}}}}, b)
	if n := testutil.CollectAndCount(s, "plateau_baseline_io_mode_mismatch"); n != 0 {
		t.Fatalf("mismatch gauge exported before any run: %d series", n)
	}
	record := func(direct bool, engine string) {
		s.Record(&probe.Result{Target: "t", Probe: "r", Kind: probe.KindRandom, End: time.Now(), Direct: direct, Engine: engine,
			Ops: []probe.OpResult{{Op: "read", Operations: 500, Seconds: 1}, {Op: "write", Operations: 2000, Seconds: 1}}}, false)
	}
	for _, tc := range []struct {
		direct   bool
		engine   string
		mismatch string
		ratios   int
	}{
		{true, probe.EngineLibaio, "0", 2},
		{true, probe.EngineGoroutines, "1", 0},
		{false, probe.EngineLibaio, "1", 0},
		{true, probe.EngineLibaio, "0", 2},
	} {
		record(tc.direct, tc.engine)
		want := `
# HELP plateau_baseline_io_mode_mismatch 1 when the last successful run did its I/O differently from its baseline's runs, else 0.
# TYPE plateau_baseline_io_mode_mismatch gauge
plateau_baseline_io_mode_mismatch{kind="random",probe="r",target="t"} ` + tc.mismatch + "\n"
		if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_baseline_io_mode_mismatch"); err != nil {
			t.Errorf("direct=%v engine=%s: %v", tc.direct, tc.engine, err)
		}
		if n := testutil.CollectAndCount(s, "plateau_probe_ratio"); n != tc.ratios {
			t.Errorf("direct=%v engine=%s: %d ratios exported, want %d", tc.direct, tc.engine, n, tc.ratios)
		}
		if n := testutil.CollectAndCount(s, "plateau_baseline_operations_per_second"); n != 2 {
			t.Errorf("direct=%v engine=%s: the plateau itself must stay exported, got %d series", tc.direct, tc.engine, n)
		}
	}
	// A baseline that does not record the mode applies to any run.
	b.Entries[plateau.BaselineKey{Target: "t", Probe: "r", Op: "read"}].Engine = ""
	b.Entries[plateau.BaselineKey{Target: "t", Probe: "r", Op: "write"}].Engine = ""
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{&p}}}}, b)
	record(true, probe.EngineGoroutines)
	if n := testutil.CollectAndCount(s, "plateau_probe_ratio"); n != 2 {
		t.Errorf("baseline without an engine: %d ratios, want 2", n)
	}
}
