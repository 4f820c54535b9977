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
	if w == nil || w.Value != 1000 || w.Unit != UnitBytesPerSecond || w.Runs != 5 || w.Host != "node1" || !w.MeasuredAt.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("write baseline = %+v", w)
	}
	again, err := ParseBaselines(b.Marshal(), "again.yml")
	if err != nil {
		t.Fatalf("marshalled baselines do not parse: %v\n%s", err, b.Marshal())
	}
	if len(again.Entries) != 3 || again.Entries[BaselineKey{"t", "md", "create"}].Value != 5e4 {
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
	s.Record(Outcome{Result: &Result{Target: "t", Probe: "s", Kind: KindSequential, End: time.Now(),
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
# HELP plateau_probe_ratio Last successful result of the op divided by its baseline (1 = at plateau); absent without a baseline or while the probe fails.
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
