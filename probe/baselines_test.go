package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

const baselinesYAML = `targets:
  t:
    s:
      kind: sequential
      params: sequential workers=2 file_size=1MiB block_size=256KiB
      direct: true
      engine: sync
      host: node1
      measured_at: 2026-11-30T10:00:00Z
      method: "characterize --runs 5"
      ops:
        write: {bytes_per_second: 1000, spread: 0.03, runs: 5}
        read: {bytes_per_second: 2000, spread: 0.02, runs: 5}
    md:
      kind: metadata
      ops:
        create: {operations_per_second: 5e4}
`

func TestBaselinesRoundTrip(t *testing.T) {
	b, err := ParseBaselines([]byte(baselinesYAML), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	w := b.Entries[BaselineKey{"t", "s", "write"}]
	if w == nil || w.Value != 1000 || w.Unit != UnitBytesPerSecond || w.Runs != 5 || w.Host != "node1" || !w.MeasuredAt.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) ||
		w.Direct != "true" || w.Engine != "sync" {
		t.Fatalf("write baseline = %+v", w)
	}
	again, err := ParseBaselines(b.Marshal(), "again.yml")
	if err != nil {
		t.Fatalf("marshalled baselines do not parse: %v\n%s", err, b.Marshal())
	}
	if len(again.Entries) != 3 || again.Entries[BaselineKey{"t", "md", "create"}].Value != 5e4 ||
		again.Entries[BaselineKey{"t", "s", "read"}].Engine != "sync" || again.Entries[BaselineKey{"t", "s", "read"}].Direct != "true" {
		t.Fatalf("round trip lost entries: %s", again.Marshal())
	}
}

func TestBaselineAppliesOnlyToSameParameters(t *testing.T) {
	b, _ := ParseBaselines([]byte(baselinesYAML), "b.yml")
	p := smallSeq("s")
	if e, why := b.For("t", &p, "write"); e == nil {
		t.Fatalf("baseline with matching params not applied: %s", why)
	}
	p.BlockSize = 512 << 10
	if e, why := b.For("t", &p, "write"); e != nil || !strings.Contains(why, "measured with") {
		t.Fatalf("baseline of other params applied (%v, %q)", e, why)
	}
	md := ProbeConfig{Name: "md", Kind: KindMetadata, Workers: 9, Files: 3}
	if e, _ := b.For("t", &md, "create"); e == nil {
		t.Fatal("hand-written baseline without params must apply whatever the params")
	}
}

func TestBadBaselinesNameLineAndField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"targets:\n  t:\n    s:\n      kind: sequential\n      ops:\n        write: {bytes_per_second: fast}\n", "b.yml:6: targets.t.s.ops.write.bytes_per_second: must be a non-negative number"},
		{"targets:\n  t:\n    s:\n      kind: sequential\n      ops:\n        create: {operations_per_second: 1}\n", "b.yml:6: targets.t.s.ops.create: kind sequential has no op \"create\""},
		{"targets:\n  t:\n    s:\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:4: targets.t.s.kind: is required"},
		{"targets:\n  t:\n    s:\n      kind: sequential\n      colour: red\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:5: targets.t.s.colour: unknown key"},
		{"targets:\n  t:\n    s:\n      kind: sequential\n      measured_at: yesterday\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:5: targets.t.s.measured_at: invalid time"},
		{"targets:\n  t:\n    s:\n      kind: sequential\n      direct: yes\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:5: targets.t.s.direct: must be true or false"},
		{"targets:\n  t:\n    s:\n      kind: random\n      engine: io_uring\n      ops:\n        read: {operations_per_second: 1}\n", "b.yml:5: targets.t.s.engine: unknown engine \"io_uring\" (one of sync, libaio, goroutines)"},
		{"targets: [\n", "b.yml: "},
	} {
		if _, err := ParseBaselines([]byte(tc.yaml), "b.yml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

func TestBaselinesWriteKeepsBackup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baselines.yml")
	b, _ := ParseBaselines([]byte(baselinesYAML), "b.yml")
	if backup, err := b.Write(path); err != nil || backup != "" {
		t.Fatalf("first write: backup %q, %v", backup, err)
	}
	b.Entries[BaselineKey{"t", "s", "write"}].Value = 1234
	backup, err := b.Write(path)
	if err != nil || backup == "" {
		t.Fatalf("second write: backup %q, %v", backup, err)
	}
	old, _ := LoadBaselines(backup)
	cur, _ := LoadBaselines(path)
	if old.Entries[BaselineKey{"t", "s", "write"}].Value != 1000 || cur.Entries[BaselineKey{"t", "s", "write"}].Value != 1234 {
		t.Fatal("backup or new file has the wrong content")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestStoreExportsRatioAgainstBaseline(t *testing.T) {
	b, _ := ParseBaselines([]byte(baselinesYAML), "b.yml")
	p := smallSeq("s")
	s := NewStore()
	s.Configure(&Config{Targets: []*Target{{Name: "t", WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*ProbeConfig{&p}}}}, b)
	s.Record(Outcome{Result: &Result{Target: "t", Probe: "s", Kind: KindSequential, End: time.Now(), Direct: true, Engine: engineSync,
		Ops: []OpResult{{Op: "write", Bytes: 500, Operations: 2, Seconds: 1}, {Op: "read", Bytes: 3000, Operations: 2, Seconds: 1}}}})
	want := `
# HELP plateau_alert_threshold_ratio Ratio to baseline below which the probe's results are a warning or critical regression (the target's warning_ratio and critical_ratio).
# TYPE plateau_alert_threshold_ratio gauge
plateau_alert_threshold_ratio{probe="s",severity="critical",target="t"} 0.5
plateau_alert_threshold_ratio{probe="s",severity="warning",target="t"} 0.8
# HELP plateau_baseline_throughput_bytes_per_second The op's plateau: throughput the same probe reached on a known-good system, in bytes per second.
# TYPE plateau_baseline_throughput_bytes_per_second gauge
plateau_baseline_throughput_bytes_per_second{kind="sequential",op="read",probe="s",target="t"} 2000
plateau_baseline_throughput_bytes_per_second{kind="sequential",op="write",probe="s",target="t"} 1000
# HELP plateau_probe_ratio Last successful result of the op divided by its baseline (1 = at plateau); absent without a baseline, while the probe fails, or while its I/O mode differs from the baseline's.
# TYPE plateau_probe_ratio gauge
plateau_probe_ratio{kind="sequential",op="read",probe="s",target="t"} 1.5
plateau_probe_ratio{kind="sequential",op="write",probe="s",target="t"} 0.5
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "plateau_probe_ratio", "plateau_baseline_throughput_bytes_per_second", "plateau_alert_threshold_ratio"); err != nil {
		t.Fatal(err)
	}
	// Without baselines the ratio is absent, not 0 or +Inf.
	s.Configure(&Config{Targets: []*Target{{Name: "t", Probes: []*ProbeConfig{&p}}}}, nil)
	if n := testutil.CollectAndCount(s, "plateau_probe_ratio"); n != 0 {
		t.Fatalf("%d ratios exported without baselines", n)
	}
}

// A baseline measured with libaio and O_DIRECT says nothing about a run
// that fell back to goroutines or to the page cache: such a run gets no
// ratio, so it can neither raise nor hide a below-plateau alert, and the
// mismatch gauge says why the ratio is gone.
func TestStoreComparesOnlyRunsOfTheBaselinesIOMode(t *testing.T) {
	b, err := ParseBaselines([]byte("targets:\n  t:\n    r:\n      kind: random\n      direct: true\n      engine: libaio\n      ops:\n        read: {operations_per_second: 1000}\n        write: {operations_per_second: 1000}\n"), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := ProbeConfig{Name: "r", Kind: KindRandom}
	s := NewStore()
	s.Configure(&Config{Targets: []*Target{{Name: "t", Probes: []*ProbeConfig{&p}}}}, b)
	if n := testutil.CollectAndCount(s, "plateau_baseline_io_mode_mismatch"); n != 0 {
		t.Fatalf("mismatch gauge exported before any run: %d series", n)
	}
	record := func(direct bool, engine string) {
		s.Record(Outcome{Result: &Result{Target: "t", Probe: "r", Kind: KindRandom, End: time.Now(), Direct: direct, Engine: engine,
			Ops: []OpResult{{Op: "read", Operations: 500, Seconds: 1}, {Op: "write", Operations: 2000, Seconds: 1}}}})
	}
	for _, tc := range []struct {
		direct   bool
		engine   string
		mismatch string
		ratios   int
	}{
		{true, engineLibaio, "0", 2},
		{true, engineGoroutines, "1", 0},
		{false, engineLibaio, "1", 0},
		{true, engineLibaio, "0", 2},
	} {
		record(tc.direct, tc.engine)
		want := `
# HELP plateau_baseline_io_mode_mismatch 1 when the last successful run did its I/O differently (direct, engine of plateau_probe_info) from the runs its baseline was measured with; its ratio is then not exported. Present once a probe with a baseline has succeeded.
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
	b.Entries[BaselineKey{"t", "r", "read"}].Engine = ""
	b.Entries[BaselineKey{"t", "r", "write"}].Engine = ""
	s.Configure(&Config{Targets: []*Target{{Name: "t", Probes: []*ProbeConfig{&p}}}}, b)
	record(true, engineGoroutines)
	if n := testutil.CollectAndCount(s, "plateau_probe_ratio"); n != 2 {
		t.Errorf("baseline without an engine: %d ratios, want 2", n)
	}
}

func FuzzParseBaselines(f *testing.F) {
	f.Add([]byte(baselinesYAML))
	f.Add([]byte("targets: {t: {s: {kind: random, ops: {read: {operations_per_second: 1}}}}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBaselines(data, "fuzz.yml")
		if err != nil {
			return
		}
		again, err := ParseBaselines(b.Marshal(), "again.yml")
		if err != nil {
			t.Fatalf("marshalled baselines do not parse: %v\n%s", err, b.Marshal())
		}
		if len(again.Entries) != len(b.Entries) {
			t.Fatalf("round trip changed %d entries into %d", len(b.Entries), len(again.Entries))
		}
	})
}

func TestBaselineBackupsNeverOverwrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baselines.yml")
	b, _ := ParseBaselines([]byte(baselinesYAML), "b.yml")
	seen := map[string]bool{}
	for i := 0; i < 5; i++ {
		backup, err := b.Write(path)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && (backup == "" || seen[backup]) {
			t.Fatalf("write %d: backup %q reused or missing", i, backup)
		}
		seen[backup] = true
	}
}

// An empty set (a config whose probes all failed to characterize) must
// write a file that reads back, and a hand-written "targets:" with nothing
// under it means no baselines, not an error.
func TestEmptyBaselinesRoundTrip(t *testing.T) {
	for _, text := range []string{"", "targets:\n", "targets: {}\n"} {
		b, err := ParseBaselines([]byte(text), "b.yml")
		if err != nil || len(b.Entries) != 0 {
			t.Fatalf("%q: %v, %d entries", text, err, len(b.Entries))
		}
		if _, err := ParseBaselines(b.Marshal(), "again.yml"); err != nil {
			t.Fatalf("%q: marshalled empty baselines do not parse: %v\n%s", text, err, b.Marshal())
		}
	}
}
