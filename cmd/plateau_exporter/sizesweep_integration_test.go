//go:build integration

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// TestIntegrationSizeSweepOnLoopExt4 runs characterize --size-sweep on a
// loop-mounted ext4 and checks what it reports against what it ran:
// relations only, never speeds, so it holds on a loaded two-core machine.
func TestIntegrationSizeSweepOnLoopExt4(t *testing.T) {
	probetest.RequireRoot(t)
	for cmd, pkg := range map[string]string{"losetup": "util-linux", "mkfs.ext4": "e2fsprogs", "mount": "mount"} {
		probetest.RequireCommand(t, cmd, pkg)
	}
	// Backed by RAM, written in full before mkfs (MountLoopIn: not sparse,
	// and not fallocated either, whose unwritten extents the first writes
	// would convert inside the timing), and throttled to 40 MB/s both ways,
	// so the device has a plateau that no load on the machine moves. The
	// cleanups unmount and detach it whatever happens. Measured here: the
	// throttle lets the first few MiB of a run through at the RAM's speed
	// (GiB/s up to 4MiB files), and from 8MiB on every size reads 37.8 to
	// 39.3 MiB/s, so the sweep has a small size that misses the plateau and
	// larger ones that reach it. Unthrottled, the RAM device moved by 2-4x
	// between runs on a loaded two-core machine and no size was within 5%
	// of 8x it.
	loop := probetest.MountLoopIn(t, probetest.MemoryDir(t), "ext4", 1<<30)
	cg := probetest.NewIOCgroup(t, loop.DevNum)
	if err := cg.ThrottleRead(40e6); err != nil {
		t.Fatal(err)
	}
	if err := cg.ThrottleWrite(40e6); err != nil {
		t.Fatal(err)
	}
	cg.Enter(t)
	target := filepath.Join(loop.Mount, "plateau")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	baseFile := filepath.Join(dir, "baselines.yml")
	cfg := filepath.Join(dir, "plateau.yml")
	// An interval of 10s: 360 runs an hour, so every hourly cost is a
	// whole number of MiB and reads back exactly.
	const interval = 10 * time.Second
	text := fmt.Sprintf(`defaults:
  interval: %s
  timeout: 8s
targets:
  - name: loop
    path: %s
    min_free_ratio: 0.05
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB}
baselines_file: %s
`, interval, target, baseFile)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}

	p := &probe.ProbeConfig{Kind: probe.KindSequential, Workers: 1, FileSize: 4 << 20, BlockSize: 1 << 20, Interval: interval, Timeout: 8 * time.Second}
	// A burst of other I/O on the machine can still land in one size's
	// runs; a second sweep is allowed before the test gives up on finding
	// a size, as the characterize test allows a second characterization.
	var out string
	var summary []string
	for attempt := 1; attempt <= 2 && summary == nil; attempt++ {
		out = sizeSweepOnce(t, cfg, p, interval)
		summary = regexp.MustCompile(`smallest good file_size: (\S+), (\S+) of I/O per hour at the 10s interval`).FindStringSubmatch(out)
		if summary == nil {
			t.Logf("attempt %d found no good size", attempt)
		}
	}
	if summary == nil {
		t.Fatalf("two size sweeps of a throttled device found no size within 5%% of 8x it:\n%s", out)
	}

	// What was written is one of the swept, judged sizes, and the summary
	// line gives its hourly cost as the table does.
	b, err := plateau.LoadBaselines(baseFile)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := b.MinSizeFor("loop", &probe.ProbeConfig{Name: "seq", Kind: probe.KindSequential})
	if !ok || m.String() != summary[1] || m.Value < 1<<20 || m.Value > 16<<20 || m.Value&(m.Value-1) != 0 {
		t.Fatalf("baselines hold min_file_size %+v (%v); the report chose %s, want one of the judged sizes 1MiB ... 16MiB", m, ok, summary[1])
	}
	perHour, _ := probe.ParseSize(summary[2])
	if want := probe.BytesPerRun(characterize.WithSize(p, m.Value)) * int64(time.Hour/interval); perHour != want {
		t.Errorf("hourly cost of %s = %s, want BytesPerRun × 360 = %s", m, summary[2], probe.FormatSize(want))
	}
	data, _ := os.ReadFile(baseFile)
	if !strings.Contains(string(data), "min_file_size: "+m.String()+"\n") {
		t.Errorf("baselines file does not carry min_file_size: %s:\n%s", m, data)
	}

	// check-config warns for the probe below that size, and not at it;
	// it prints the target's and the config's hourly I/O.
	below := m.Value / 2
	if below < 1<<20 {
		below = 512 << 10
	}
	for _, tc := range []struct {
		size int64
		warn bool
	}{{m.Value, false}, {below, true}} {
		text := strings.Replace(string(mustRead(t, cfg)), "file_size: "+probe.FormatSize(p.FileSize), "file_size: "+probe.FormatSize(tc.size), 1)
		text = strings.Replace(text, "block_size: 1MiB", "block_size: 512KiB", 1)
		cfg2 := filepath.Join(dir, "check.yml")
		if err := os.WriteFile(cfg2, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := runBinary(t, "--config.file", cfg2, "check-config")
		if code != 0 {
			t.Fatalf("check-config exited %d:\n%s\n%s", code, out, stderr)
		}
		warned := strings.Contains(out, "warning: loop/seq: file_size "+probe.FormatSize(tc.size)+" is below "+m.String())
		hourly := probe.FormatIO(2 * tc.size * 360)
		if warned != tc.warn || !strings.Contains(out, "target loop: "+hourly+" of I/O per hour") || !strings.Contains(out, "all targets: "+hourly+" of I/O per hour") {
			t.Errorf("file_size %s: warned=%v, want %v, and hourly I/O %s:\n%s", probe.FormatSize(tc.size), warned, tc.warn, hourly, out)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// sizeSweepOnce runs characterize --size-sweep on the config's one
// sequential probe p (file_size 4MiB) and checks its table against what it
// ran: the sizes, their costs and which were judged. At most 2GiB of I/O:
// 3 runs of 2 × (1 ... 128MiB) is 1530MiB, and 256MiB would bring it to
// 3066MiB, so the ladder (to 64 × 4MiB) is capped there and says so; sizes
// up to 16MiB are judged against 8x them.
func sizeSweepOnce(t *testing.T, cfg string, p *probe.ProbeConfig, interval time.Duration) string {
	t.Helper()
	out, stderr, code := runBinary(t, "--config.file", cfg, "--probe.hostname", "node1", "characterize", "--runs", "1", "--run-spacing", "0s",
		"--size-sweep", "--size-sweep.max-io", "2GiB")
	t.Logf("characterize --size-sweep:\n%s", out)
	if code != 0 {
		t.Fatalf("characterize --size-sweep exited %d:\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "capped: file_size=256MiB would bring the sweep's I/O to 3066MiB, over --size-sweep.max-io (2GiB)") {
		t.Errorf("the sweep does not say where --size-sweep.max-io capped it:\n%s", out)
	}
	row := regexp.MustCompile(`(?m)^(\d+MiB)\s+\S+ \S+\s+\S+ \S+\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$`)
	rows := row.FindAllStringSubmatch(out, -1)
	if len(rows) != 8 {
		t.Fatalf("want one table row per size 1MiB ... 128MiB, got %d:\n%s", len(rows), out)
	}
	for i, r := range rows {
		size, err := probe.ParseSize(r[1])
		if err != nil || size != int64(1<<20)<<i {
			t.Fatalf("row %d is size %q, want %s", i, r[1], probe.FormatSize(int64(1<<20)<<i))
		}
		v := characterize.WithSize(p, size)
		perRun, _ := probe.ParseSize(r[2])
		perHour, _ := probe.ParseSize(r[3])
		moved, _ := probe.ParseSize(r[4])
		// The cost columns are BytesPerRun at the size, times the runs an
		// hour at the configured interval; a sequential run moves exactly
		// what it plans.
		runsPerHour := int64(time.Hour / interval)
		if perRun != probe.BytesPerRun(v) || perHour != probe.BytesPerRun(v)*runsPerHour || moved != perRun {
			t.Errorf("size %s: per run %s, per hour %s, moved %s; want %s, %s and the per-run bytes", r[1], r[2], r[3], r[4],
				probe.FormatSize(probe.BytesPerRun(v)), probe.FormatSize(probe.BytesPerRun(v)*runsPerHour))
		}
		// Sizes without an 8x step are not judged.
		if judged := !strings.HasPrefix(r[5], "- (no "); judged != (i+3 < len(rows)) {
			t.Errorf("size %s judged=%v (%s)", r[1], judged, r[5])
		}
	}
	return out
}
