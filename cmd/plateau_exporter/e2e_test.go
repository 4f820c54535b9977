package main

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden from this run")

// volatile lists the series whose values change from run to run; the golden
// test keeps their names and labels but masks their values.
var volatile = regexp.MustCompile(`^(plateau_probe_(duration|last_run|last_success|throughput|operations_per|latency|runs_total|io_bytes|target_io_bytes|target_regression|target_low_score|target_normal_ratio|target_below_warning|target_below_plateau|in_progress|skips_total|ratio|change_ratio|change_noise_ratio|change_fast_ratio|change_fast_noise_ratio|change_low_runs|regression|failing|not_run|target_failing_probes|target_not_run_probes)|plateau_config_last_reload_success_timestamp|plateau_scrape_collector_duration_seconds|plateau_gpfs_command_(duration_seconds|last_run_timestamp_seconds))`)

var (
	goVersionLabel = regexp.MustCompile(`goversion="[^"]*"`)
	// direct depends on the temp directory's file system (tmpfs or not).
	directLabel = regexp.MustCompile(`direct="(true|false)"`)
)

// machineDependent is a series whose presence depends on the machine: the
// node's own I/O during a run is measured only when the temp directory is
// on a block device or NFS, not on tmpfs or overlay, and so is the
// target's comparison of it with the plateau. The golden file leaves them
// out; checkConcurrent looks at the first apart.
var machineDependent = regexp.MustCompile(`^(# (HELP|TYPE) )?plateau_probe_(concurrent_bytes_per_second|target_concurrent_busy)[{ ]`)

// normalize masks what changes between runs, as node_exporter's
// end-to-end-test.sh does with its sed filters.
func normalize(metrics string) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(metrics), "\n") {
		if machineDependent.MatchString(line) {
			continue
		}
		line = goVersionLabel.ReplaceAllString(line, `goversion="<go>"`)
		line = directLabel.ReplaceAllString(line, `direct="<fs>"`)
		if !strings.HasPrefix(line, "#") && volatile.MatchString(line) {
			line = line[:strings.LastIndexByte(line, ' ')] + " <volatile>"
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n") + "\n"
}

// checkConcurrent holds plateau_probe_concurrent_bytes_per_second, when the
// temp directory's file system has counters, to a read and a write series
// per probe with rates that are not negative.
func checkConcurrent(t *testing.T, metrics string) {
	t.Helper()
	ops := map[string]int{}
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, "plateau_probe_concurrent_bytes_per_second{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			t.Errorf("%s: not a rate", line)
		}
		for _, op := range []string{"read", "write"} {
			if strings.Contains(line, `op="`+op+`"`) {
				ops[op]++
			}
		}
	}
	if ops["read"] != ops["write"] {
		t.Errorf("concurrent I/O series: %d read, %d write; want one of each per probe", ops["read"], ops["write"])
	}
	t.Logf("concurrent I/O measured for %d probes (none when the temp directory is on tmpfs or overlay)", ops["read"])
}

// goldenBaselines gives the golden config's probes a plateau, so the ratio
// and baseline gauges are part of the golden output. The values are hand
// written (no params), far below any real result.
const goldenBaselines = `targets:
  e2e:
    seq:
      kind: sequential
      ops:
        write: {bytes_per_second: 1000}
        read: {bytes_per_second: 1000}
    md:
      kind: metadata
      ops:
        create: {operations_per_second: 1}
        stat: {operations_per_second: 1}
        read: {operations_per_second: 1}
        remove: {operations_per_second: 1}
`

// TestGoldenMetrics runs the real binary, waits for a real run of every
// probe and diffs /metrics against testdata/metrics.golden.
func TestGoldenMetrics(t *testing.T) {
	cfg, _ := writeConfig(t, "{name: seq, kind: sequential, workers: 2, file_size: 4MiB, block_size: 1MiB}\n      - {name: md, kind: metadata, workers: 2, files: 64}")
	baselines := filepath.Join(filepath.Dir(cfg), "baselines.yml")
	if err := os.WriteFile(baselines, []byte(goldenBaselines), 0o600); err != nil {
		t.Fatal(err)
	}
	appendLine(t, cfg, "baselines_file: "+baselines)
	history := writeGoldenHistory(t, cfg)
	fixtures := filepath.Join("..", "..", "collector", "fixtures")
	gpfs := filepath.Join(fixtures, "gpfs")
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=e2e-node", "--web.disable-exporter-metrics", "--probe.history-file="+history,
		// Every counter collector, on the fixture trees and fake GPFS commands.
		"--path.sysfs="+filepath.Join(fixtures, "sys"), "--path.procfs="+filepath.Join(fixtures, "proc"),
		"--collector.gpfs.mmpmon-path="+filepath.Join(gpfs, "mmpmon"), "--collector.gpfs.mmgetstate-path="+filepath.Join(gpfs, "mmgetstate"),
		"--collector.gpfs.mmhealth-path="+filepath.Join(gpfs, "mmhealth"), "--collector.gpfs.nsd",
		// The diagnosis commands (waiters, verbs, disks, QoS); the mount
		// state comes from the fixture proc tree's mounts.
		"--collector.gpfs.mmdiag-path="+filepath.Join(gpfs, "mmdiag"), "--collector.gpfs.mmfsadm-path="+filepath.Join(gpfs, "mmfsadm"),
		"--collector.gpfs.mmlsfs-path="+filepath.Join(gpfs, "mmlsfs"), "--collector.gpfs.mmlsdisk-path="+filepath.Join(gpfs, "mmlsdisk"),
		"--collector.gpfs.mmlsqos-path="+filepath.Join(gpfs, "mmlsqos"),
		// The client's I/O history: its per-NSD-server series.
		"--collector.gpfs.iohist",
		// Lustre 2.15's layout is in the same proc and sys trees, debugfs
		// under sys/kernel/debug (the flag's default).
		"--collector.lustre", "--collector.lustre_server", "--collector.lustre_server.job-stats", "--collector.lustre_server.job-stats-top=3",
		// LNet health from a fake lnetctl printing 2.15's output; the
		// module's sysfs directory is in the fixture sys tree.
		"--collector.lnet.lnetctl-path="+filepath.Join(fixtures, "lnet", "lnetctl"),
		// No real /dev/nvme* of the machine running the test may leak in.
		"--collector.nvme.dev-dir="+t.TempDir())
	probetest.WaitUntil(t, "a successful run of every probe", 60*time.Second, func() bool {
		m := d.metrics()
		return value(m, `plateau_probe_success{kind="sequential"`) == 1 && value(m, `plateau_probe_success{kind="metadata"`) == 1
	})
	raw := d.metrics()
	checkConcurrent(t, raw)
	got := normalize(raw)
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenMetrics -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("/metrics differs from %s (run with -update after checking the change):\n%s", golden, lineDiff(string(want), got))
	}
}

// writeGoldenHistory writes a history file in which every op of the
// config's probes has one run fewer than the change ratio needs, so that
// the first real run exports plateau_probe_change_ratio and its noise, and
// the golden output names them for the rules and dashboards checked
// against it. The results are far below any real one, like the baselines.
func writeGoldenHistory(t *testing.T, cfgFile string) string {
	t.Helper()
	cfg, err := probe.ReadConfigFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	h := plateau.History{}
	for _, tg := range cfg.Targets {
		for _, p := range tg.Probes {
			for _, op := range probe.OpsOf(p.Kind) {
				results := make([]float64, plateau.HistoryRuns-1)
				for i := range results {
					results[i] = float64(1000 * (1 + i%2)) // two levels, as real series have
				}
				h[plateau.HistoryKey{Target: tg.Name, Probe: p.Name, Op: op, Params: plateau.ProbeParams(p)}] = plateau.HistoryEntry{Results: results, Updated: time.Now()}
			}
		}
	}
	path := filepath.Join(filepath.Dir(cfgFile), "history.json")
	if err := plateau.WriteHistoryFile(path, h); err != nil {
		t.Fatal(err)
	}
	return path
}

// lineDiff lists lines only in want (-) or only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
