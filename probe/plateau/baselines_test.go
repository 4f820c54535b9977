package plateau

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/internal/yamlfield"
)

func TestBaselinesRoundTrip(t *testing.T) {
	b, err := ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	w := b.Entries[BaselineKey{"t", "s", "write"}]
	if w == nil || w.Value != 1000 || w.Unit != probe.UnitBytesPerSecond || w.Runs != 5 || w.Host != "node1" || !w.MeasuredAt.Equal(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)) ||
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
	b, _ := ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
	p := probefixture.SmallSeq("s")
	if e, why := b.For("t", &p, "write"); e == nil {
		t.Fatalf("baseline with matching params not applied: %s", why)
	}
	p.BlockSize = 512 << 10
	if e, why := b.For("t", &p, "write"); e != nil || !strings.Contains(why, "measured with") {
		t.Fatalf("baseline of other params applied (%v, %q)", e, why)
	}
	md := probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 9, Files: 3}
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
		{"targets: [\n", "b.yml:1: did not find expected node content"},
	} {
		if _, err := ParseBaselines([]byte(tc.yaml), "b.yml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// Marshal's numbers are numbers to YAML 1.1 tools too, which read an
// exponent only after a dot ("3e+09" would be a string to PyYAML).
func TestYAMLFloat(t *testing.T) {
	for v, want := range map[float64]string{3e9: "3.0e+09", 1.25e9: "1.25e+09", 1e-5: "1.0e-05", 1000: "1000", 0.03: "0.03", 0: "0"} {
		if got := yamlfield.Float(v, 6); got != want {
			t.Errorf("yamlfield.Float(%g) = %q, want %q", v, got, want)
		}
	}
}

func TestBaselinesWriteKeepsBackup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baselines.yml")
	b, _ := ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
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

func FuzzParseBaselines(f *testing.F) {
	f.Add([]byte(probefixture.BaselinesYAML))
	f.Add([]byte("targets: {t: {s: {kind: random, ops: {read: {operations_per_second: 1}}}}}\n"))
	for _, at := range []string{"2026-12-01 08:52:31+00:00", "2001-12-14 21:59:43.10 -5", "2002-12-14", "2001-12-14t21:59:43.10-05:00", "2026-02-30"} {
		f.Add([]byte("targets: {t: {s: {kind: random, measured_at: " + at + ", ops: {read: {operations_per_second: 3e9, spread: 1e-05}}}}}\n"))
	}
	// Each kind's smallest good size (characterize --size-sweep), and one
	// given to the wrong kind.
	for kind, size := range map[string]string{"sequential": "min_file_size: 16MiB", "shared_file": "min_segment_size: 8MiB", "metadata": "min_files: 256", "random": "min_duration: 1.5s", "metadata ": "min_duration: 2s"} {
		op := probe.OpsOf(strings.TrimSpace(kind))[0]
		f.Add([]byte("targets: {t: {s: {kind: " + strings.TrimSpace(kind) + ", " + size + ", ops: {" + op + ": {operations_per_second: 1}}}}}\n"))
	}
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
		if len(again.MinSizes) != len(b.MinSizes) {
			t.Fatalf("round trip changed %d smallest good sizes into %d", len(b.MinSizes), len(again.MinSizes))
		}
		for k, m := range b.MinSizes {
			if again.MinSizes[k].Value != m.Value {
				t.Fatalf("round trip changed %s/%s's %s from %s to %s", k.Target, k.Probe, m.Key, m, again.MinSizes[k])
			}
		}
	})
}

func TestBaselineBackupsNeverOverwrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baselines.yml")
	b, _ := ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
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
