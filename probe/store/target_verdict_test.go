package store

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/iocount"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

const targetVerdictHelp = `# HELP plateau_probe_target_below_warning 1 when any op of the target has its 3-run median ratio under the warning threshold, else 0.
# TYPE plateau_probe_target_below_warning gauge
# HELP plateau_probe_target_regression 1 when any op of any probe of the target is in sudden regression, else 0.
# TYPE plateau_probe_target_regression gauge
`

// The per-target verdicts are the maxima of the ops' verdicts, and absent
// where no op has one: one halved op of one probe puts its target in
// regression, a target whose ops hold is not.
func TestStoreTargetVerdictsAreTheMaximaOfTheOps(t *testing.T) {
	s, run := twoTargetStore(t)
	if n := testutil.CollectAndCount(s, "plateau_probe_target_regression", "plateau_probe_target_below_warning"); n != 0 {
		t.Fatalf("%d target verdicts before any run, want none", n)
	}
	run("t", 700, 2000)
	run("u", 1000, 2000)
	// u has no baselines (the fixture's are t's): no ratio, no median, no
	// below-warning verdict; its change statistic needs none.
	want := targetVerdictHelp + `plateau_probe_target_below_warning{target="t"} 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_probe_target_regression", "plateau_probe_target_below_warning"); err != nil {
		t.Fatalf("after one run (a median, no change statistic yet): %v", err)
	}
	// A full history, then t's write op halves for the last runs while
	// its read op and all of u hold.
	for i := 0; i < plateau.HistoryRuns-plateau.ChangeRuns; i++ {
		run("t", 1000*float64(1+i%2), 2000*float64(1+i%2))
		run("u", 1000*float64(1+i%2), 2000*float64(1+i%2))
	}
	for i := 0; i < plateau.ChangeRuns; i++ {
		run("t", 500*float64(1+(i+1)%2), 2000*float64(1+(i+1)%2))
		run("u", 1000*float64(1+(i+1)%2), 2000*float64(1+(i+1)%2))
	}
	perOp := func(target, op string) float64 {
		return probetest.MetricValue(t, s, "plateau_probe_regression", map[string]string{"target": target, "op": op})
	}
	if perOp("t", "write") != 1 || perOp("t", "read") != 0 || perOp("u", "write") != 0 || perOp("u", "read") != 0 {
		t.Fatalf("per-op regression t write %v read %v, u write %v read %v; want 1 0 0 0",
			perOp("t", "write"), perOp("t", "read"), perOp("u", "write"), perOp("u", "read"))
	}
	// t's write also has a median of its last 3 runs (500, 1000, 500) at
	// half its baseline: under the warning threshold.
	want = targetVerdictHelp + `plateau_probe_target_below_warning{target="t"} 1
plateau_probe_target_regression{target="t"} 1
plateau_probe_target_regression{target="u"} 0
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_probe_target_regression", "plateau_probe_target_below_warning"); err != nil {
		t.Fatalf("after t's write halved: %v", err)
	}
	// A failing run takes the ops' verdicts away, and the target's with them.
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Reason: probe.ReasonEIO}, false)
	want = targetVerdictHelp + `plateau_probe_target_regression{target="u"} 0
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_probe_target_regression", "plateau_probe_target_below_warning"); err != nil {
		t.Fatalf("while t fails: %v", err)
	}
}

// The target's I/O counter is the sum of its probes' plateau_probe_io_bytes_total
// and, unlike that sum, never goes down: a probe a reload removes keeps
// its bytes in the target's total, and another target's runs do not count.
func TestStoreTargetIOBytesSumTheProbesAndSurviveReloads(t *testing.T) {
	p := probefixture.SmallSeq("s")
	q := probefixture.SmallSeq("q")
	other := probefixture.SmallSeq("s")
	both := &probe.Config{Targets: []*probe.Target{
		{Name: "t", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&p, &q}},
		{Name: "u", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&other}},
	}}
	s := New()
	s.Configure(both, nil)
	const help = "# HELP plateau_probe_target_io_bytes_total Bytes all probes of the target moved to or from the file system.\n# TYPE plateau_probe_target_io_bytes_total counter\n"
	check := func(when, t1, u1 string) {
		t.Helper()
		want := help + `plateau_probe_target_io_bytes_total{target="t"} ` + t1 + "\n" + `plateau_probe_target_io_bytes_total{target="u"} ` + u1 + "\n"
		if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_probe_target_io_bytes_total"); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	check("before any run", "0", "0")
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	run := func(target, name string, write, read int64) {
		end = end.Add(time.Minute)
		s.Record(&probe.Result{Target: target, Probe: name, Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end,
			Direct: true, Engine: probe.EngineSync,
			Ops: []probe.OpResult{{Op: "write", Bytes: write, Operations: 1, Seconds: 1}, {Op: "read", Bytes: read, Operations: 1, Seconds: 1}}}, false)
	}
	run("t", "s", 100, 200)
	run("t", "q", 10, 20)
	run("u", "s", 1, 2)
	check("after a run of each probe", "330", "3")
	// q is removed: its plateau_probe_io_bytes_total goes, its bytes stay
	// in t's total, and a run of it that ends after the reload is dropped.
	s.Configure(&probe.Config{Targets: []*probe.Target{
		{Name: "t", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&p}},
		{Name: "u", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&other}},
	}}, nil)
	run("t", "q", 1000, 1000)
	run("t", "s", 100, 200)
	check("after q was removed", "630", "3")
}

// The chronic verdict per target: absent until an op has its 24-run
// median (12 runs), 0 while every op's median holds, 1 once one op's runs
// have been under its warning threshold for most of the last 24 runs, and
// absent for a target without baselines.
func TestStoreTargetBelowPlateauIsTheLongMedianUnderWarning(t *testing.T) {
	s, run := twoTargetStore(t)
	const help = "# HELP plateau_probe_target_below_plateau 1 when any op of the target has its 24-run median ratio under the warning threshold, else 0.\n# TYPE plateau_probe_target_below_plateau gauge\n"
	check := func(when, want string) {
		t.Helper()
		if want != "" {
			want = help + want
		}
		if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_probe_target_below_plateau"); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	// t's baselines are 1000 B/s write and 2000 B/s read; u has none.
	for i := 1; i < plateau.MinLongMedianRuns; i++ {
		run("t", 1000, 2000)
		run("u", 1000, 2000)
	}
	check("before the 12th run", "")
	run("t", 1000, 2000)
	run("u", 1000, 2000)
	check("at the 12th run", `plateau_probe_target_below_plateau{target="t"} 0`+"\n")
	// The write falls to 70% of its plateau, the read holds: after 12 low
	// runs of 24 the median is halfway, after 13 it is low.
	for i := 0; i < plateau.LongMedianRuns/2; i++ {
		run("t", 700, 2000)
	}
	check("after 12 low runs of 24", `plateau_probe_target_below_plateau{target="t"} 0`+"\n")
	run("t", 700, 2000)
	check("after 13 low runs of 24", `plateau_probe_target_below_plateau{target="t"} 1`+"\n")
}

// twoTargetStore is a store with target t, whose probe s has the
// fixture's baselines (1000 B/s write, 2000 B/s read, in the runs' I/O
// mode: a write at 700 is under the 0.8 warning threshold, a read at 2000
// is not), and target u with the same probe and no baselines; run records
// a successful run of s on a target, a minute after the last.
func twoTargetStore(t *testing.T) (s *Store, run func(target string, write, read float64)) {
	t.Helper()
	b, err := plateau.ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := probefixture.SmallSeq("s")
	q := probefixture.SmallSeq("s")
	s = New()
	s.Configure(&probe.Config{Targets: []*probe.Target{
		{Name: "t", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&p}},
		{Name: "u", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&q}},
	}}, b)
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	return s, func(target string, write, read float64) {
		end = end.Add(time.Minute)
		s.Record(&probe.Result{Target: target, Probe: "s", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end,
			Direct: true, Engine: probe.EngineSync,
			Ops: []probe.OpResult{{Op: "write", Bytes: int64(write), Operations: 1, Seconds: 1}, {Op: "read", Bytes: int64(read), Operations: 1, Seconds: 1}}}, false)
	}
}

// The node's own I/O against each probe's throughput plateau, per target:
// under half of the read plateau is not busy, over half is; a target
// without baselines has no verdict, and a failing run takes it away, as it
// takes the concurrent bytes away.
func TestStoreTargetConcurrentBusyIsHalfTheProbesPlateau(t *testing.T) {
	s, run := twoTargetStore(t)
	const name = "plateau_probe_target_concurrent_busy"
	value := func(target string) float64 {
		return probetest.MetricValue(t, s, name, map[string]string{"target": target})
	}
	run("t", 1000, 2000)
	if n := testutil.CollectAndCount(s, name); n != 0 {
		t.Fatalf("%d series of %s without any concurrent I/O measured, want none", n, name)
	}
	// t's read plateau is 2000 B/s: 900 B/s of the node's own reads is
	// under half of it, 1100 over; u has the same I/O and no plateau.
	for _, target := range []string{"t", "u"} {
		s.RecordConcurrent(target, "s", iocount.Rate{Read: 900, Write: 400, Source: iocount.SourceDiskstats}, true)
		run(target, 1000, 2000)
	}
	if got := value("t"); got != 0 {
		t.Fatalf("%s{t} = %v with the node reading 900 B/s against a 2000 B/s plateau, want 0", name, got)
	}
	s.RecordConcurrent("t", "s", iocount.Rate{Read: 1100, Write: 400, Source: iocount.SourceDiskstats}, true)
	run("t", 1000, 2000)
	if got := value("t"); got != 1 {
		t.Fatalf("%s{t} = %v with the node reading 1100 B/s against a 2000 B/s plateau, want 1", name, got)
	}
	// The write plateau is 1000 B/s: 600 B/s of writes alone is busy too.
	s.RecordConcurrent("t", "s", iocount.Rate{Read: 0, Write: 600, Source: iocount.SourceDiskstats}, true)
	run("t", 1000, 2000)
	if got := value("t"); got != 1 {
		t.Fatalf("%s{t} = %v with the node writing 600 B/s against a 1000 B/s plateau, want 1", name, got)
	}
	// u has no plateau, so no series. The expected output is a file, so
	// that the dashboards' drift test knows the metric: the golden
	// /metrics has no concurrent I/O without a block device.
	want, err := os.ReadFile("testdata/target_concurrent_busy.prom")
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(s, bytes.NewReader(want), name); err != nil {
		t.Fatal(err)
	}
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Reason: probe.ReasonEIO}, false)
	if n := testutil.CollectAndCount(s, name); n != 0 {
		t.Fatalf("%d series of %s while t's probe fails, want none", n, name)
	}
}

// The exporter's own conditions counted per target, which the exporter
// alerts read: each target always has its counts of failing and not-run
// probes; the count of mode mismatches exists once a probe with a baseline
// has succeeded.
func TestStoreTargetCountsTheProbesConditions(t *testing.T) {
	s, run := twoTargetStore(t)
	count := func(name, target string) float64 {
		return probetest.MetricValue(t, s, name, map[string]string{"target": target})
	}
	for _, target := range []string{"t", "u"} {
		if f, n := count("plateau_probe_target_failing_probes", target), count("plateau_probe_target_not_run_probes", target); f != 0 || n != 0 {
			t.Fatalf("target %s: %v failing and %v not-run probes before any run, want 0 and 0", target, f, n)
		}
	}
	if n := testutil.CollectAndCount(s, "plateau_baseline_target_io_mode_mismatch_probes"); n != 0 {
		t.Fatalf("%d mode-mismatch counts before any run, want none", n)
	}
	for i := 0; i < notRunSkips; i++ {
		s.RecordSkip("u", "s", "budget")
	}
	for i := 0; i < failingRuns; i++ {
		now := time.Now()
		s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: now.Add(-time.Second), End: now, Reason: probe.ReasonEIO}, false)
	}
	if got := count("plateau_probe_target_failing_probes", "t"); got != 1 {
		t.Fatalf("t has %v failing probes after %d failures, want 1", got, failingRuns)
	}
	if got := count("plateau_probe_target_not_run_probes", "u"); got != 1 {
		t.Fatalf("u has %v not-run probes after %d skips, want 1", got, notRunSkips)
	}
	if f, n := count("plateau_probe_target_failing_probes", "u"), count("plateau_probe_target_not_run_probes", "t"); f != 0 || n != 0 {
		t.Fatalf("u has %v failing probes and t %v not-run probes, want 0 and 0", f, n)
	}
	// A success in the baseline's mode: t has the count, at 0; u, without
	// baselines, none. The same run in another engine is a mismatch.
	run("t", 1000, 2000)
	if got := count("plateau_baseline_target_io_mode_mismatch_probes", "t"); got != 0 {
		t.Fatalf("t has %v probes in another I/O mode than their baseline, want 0", got)
	}
	if got := count("plateau_probe_target_failing_probes", "t"); got != 0 {
		t.Fatalf("t has %v failing probes after a success, want 0", got)
	}
	end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end,
		Direct: true, Engine: probe.EngineGoroutines,
		Ops: []probe.OpResult{{Op: "write", Bytes: 1000, Operations: 1, Seconds: 1}}}, false)
	if got := count("plateau_baseline_target_io_mode_mismatch_probes", "t"); got != 1 {
		t.Fatalf("t has %v probes in another I/O mode than their baseline after a goroutines run, want 1", got)
	}
	if n := testutil.CollectAndCount(s, "plateau_baseline_target_io_mode_mismatch_probes"); n != 1 {
		t.Fatalf("%d mode-mismatch counts, want only t's", n)
	}
}
