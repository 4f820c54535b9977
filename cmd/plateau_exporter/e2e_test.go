package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden from this run")

// volatile lists the series whose values change from run to run; the golden
// test keeps their names and labels but masks their values.
var volatile = regexp.MustCompile(`^(plateau_probe_(duration|last_run|last_success|throughput|operations_per|latency|runs_total|io_bytes|in_progress|skips_total)|plateau_config_last_reload_success_timestamp|plateau_scrape_collector_duration_seconds)`)

var (
	goVersionLabel = regexp.MustCompile(`goversion="[^"]*"`)
	// direct depends on the temp directory's file system (tmpfs or not).
	directLabel = regexp.MustCompile(`direct="(true|false)"`)
)

// normalize masks what changes between runs, as node_exporter's
// end-to-end-test.sh does with its sed filters.
func normalize(metrics string) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(metrics), "\n") {
		line = goVersionLabel.ReplaceAllString(line, `goversion="<go>"`)
		line = directLabel.ReplaceAllString(line, `direct="<fs>"`)
		if !strings.HasPrefix(line, "#") && volatile.MatchString(line) {
			line = line[:strings.LastIndexByte(line, ' ')] + " <volatile>"
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n") + "\n"
}

// TestGoldenMetrics runs the real binary, waits for a real probe run and
// diffs /metrics against testdata/metrics.golden.
func TestGoldenMetrics(t *testing.T) {
	cfg, _ := writeConfig(t, "{name: seq, kind: sequential, workers: 2, file_size: 4MiB, block_size: 1MiB}")
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=e2e-node", "--web.disable-exporter-metrics", "--collector.disable-defaults")
	waitUntil(t, "a successful probe run", 60*time.Second, func() bool { return successes(d.metrics()) >= 1 })
	got := normalize(d.metrics())
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
