package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// configWithBaselines writes a config whose baselines_file is baselines
// (which may not exist) and returns the config file.
func configWithBaselines(t *testing.T, baselines string) string {
	t.Helper()
	cfg, _ := writeConfig(t, "{name: s, kind: sequential, file_size: 4MiB, block_size: 1MiB}")
	appendLine(t, cfg, "baselines_file: "+baselines)
	return cfg
}

func writeBaseline(t *testing.T, path string, bytesPerSecond float64) {
	t.Helper()
	writeBaselineWithMode(t, path, bytesPerSecond, "")
}

// writeBaselineWithMode writes a baseline whose runs did their I/O as mode
// says (baseline keys such as "direct: true\n      engine: sync"); "" leaves
// the mode unrecorded.
func writeBaselineWithMode(t *testing.T, path string, bytesPerSecond float64, mode string) {
	t.Helper()
	if mode != "" {
		mode = "      " + mode + "\n"
	}
	b := fmt.Sprintf("targets:\n  e2e:\n    s:\n      kind: sequential\n%s      ops:\n        write: {bytes_per_second: %g}\n        read: {bytes_per_second: %g}\n", mode, bytesPerSecond, bytesPerSecond)
	if err := os.WriteFile(path, []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func runProbeCmd(t *testing.T, cfg string, extra ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"probe", "--config.file=" + cfg, "--probe.hostname=n1"}, extra...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

// The probe command's exit status is what Slurm and NHC act on.
func TestProbeCommandExitStatusFollowsPlateau(t *testing.T) {
	baselines := filepath.Join(t.TempDir(), "baselines.yml")
	cfg := configWithBaselines(t, baselines)
	writeBaseline(t, baselines, 1) // 1 B/s: any real result is far above
	if code, out := runProbeCmd(t, cfg); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("at plateau: exit %d\n%s", code, out)
	}
	writeBaseline(t, baselines, 1e15) // 1 PB/s: any real result is far below
	code, out := runProbeCmd(t, cfg)
	if code != 1 || !strings.Contains(out, "critical") || !strings.Contains(out, "0.00") {
		t.Fatalf("below plateau: exit %d, want 1 with the ratio printed\n%s", code, out)
	}
	code, out = runProbeCmd(t, cfg, "--output=json")
	if code != 1 || !strings.Contains(out, `"ratio":`) || !strings.Contains(out, `"verdict": "critical"`) {
		t.Fatalf("json: exit %d\n%s", code, out)
	}
	if code, out := runProbeCmd(t, cfg, "--target=nope"); code != 2 || !strings.Contains(out, "no configured probe matches") {
		t.Fatalf("unknown target: exit %d\n%s", code, out)
	}
}

// A missing or corrupt baselines file must not stop the daemon: probes run,
// results are exported without ratios, and a gauge and a log line say why.
func TestDaemonRunsWithoutBadBaselines(t *testing.T) {
	dir := t.TempDir()
	baselines := filepath.Join(dir, "baselines.yml")
	cfg := configWithBaselines(t, baselines)
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	probetest.WaitUntil(t, "a probe run without baselines", 30*time.Second, func() bool { return successes(d.metrics()) >= 1 })
	m := d.metrics()
	if value(m, "plateau_baselines_last_load_successful ") != 0 || strings.Contains(m, "plateau_probe_ratio{") {
		t.Fatalf("missing baselines: gauge %v, ratio exported: %v", value(m, "plateau_baselines_last_load_successful "), strings.Contains(m, "plateau_probe_ratio{"))
	}
	probetest.WaitUntil(t, "a clear log line about the missing file", 10*time.Second, func() bool {
		return strings.Contains(d.stderr.String(), "baselines not loaded") && strings.Contains(d.stderr.String(), "no such file")
	})
	if err := os.WriteFile(baselines, []byte("targets:\n  e2e:\n    s:\n      kind: sequential\n      ops:\n        write: {bytes_per_second: lots}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := httpPost(d.url + "/-/reload")
	if err != nil || resp != 200 {
		t.Fatalf("reload with a corrupt baselines file must keep the config: HTTP %d, %v", resp, err)
	}
	probetest.WaitUntil(t, "a log line naming the corrupt line and field", 10*time.Second, func() bool {
		return strings.Contains(d.stderr.String(), baselines+":6: targets.e2e.s.ops.write.bytes_per_second")
	})
	writeBaseline(t, baselines, 1e6)
	if code, _ := httpPost(d.url + "/-/reload"); code != 200 {
		t.Fatalf("reload: HTTP %d", code)
	}
	probetest.WaitUntil(t, "ratios once the baselines are fixed", 30*time.Second, func() bool {
		m := d.metrics()
		return value(m, "plateau_baselines_last_load_successful ") == 1 && value(m, `plateau_probe_ratio{kind="sequential",op="read"`) > 0
	})
}

// A run that did its I/O in another mode than its baseline's runs (buffered
// instead of O_DIRECT, goroutines instead of libaio) is not compared with
// the plateau, by the probe command or the daemon: the gauge says so
// instead. Which mode this machine's temp directory gives is read from the
// probe command's own report, so the test holds on any file system.
func TestBaselineOfAnotherIOModeIsNotCompared(t *testing.T) {
	dir := t.TempDir()
	baselines := filepath.Join(dir, "baselines.yml")
	cfg := configWithBaselines(t, baselines)
	writeBaseline(t, baselines, 1)
	code, out := runProbeCmd(t, cfg, "--output=json")
	if code != 0 || !strings.Contains(out, `"engine": "sync"`) {
		t.Fatalf("probe command: exit %d\n%s", code, out)
	}
	direct, other := "false", "true"
	if strings.Contains(out, `"direct": true`) {
		direct, other = "true", "false"
	}

	writeBaselineWithMode(t, baselines, 1, "direct: "+other+"\n      engine: sync")
	code, out = runProbeCmd(t, cfg)
	if code != 0 || !strings.Contains(out, "no-baseline (run used direct="+direct+" (baseline direct="+other+"))") {
		t.Fatalf("probe command against a baseline of another mode: exit %d, want 0 and the mode named\n%s", code, out)
	}

	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	ratio := `plateau_probe_ratio{kind="sequential",op="read"`
	mismatch := `plateau_baseline_io_mode_mismatch{kind="sequential",probe="s",target="e2e"}`
	probetest.WaitUntil(t, "the mismatch reported and no ratio", 30*time.Second, func() bool {
		m := d.metrics()
		return successes(m) >= 1 && strings.Contains(m, mismatch+" 1") && !strings.Contains(m, ratio) &&
			strings.Contains(m, `plateau_baseline_throughput_bytes_per_second{kind="sequential",op="read",probe="s",target="e2e"} 1`+"\n")
	})

	writeBaselineWithMode(t, baselines, 1, "direct: "+direct+"\n      engine: sync")
	if code, err := httpPost(d.url + "/-/reload"); code != 200 {
		t.Fatalf("reload: HTTP %d, %v", code, err)
	}
	probetest.WaitUntil(t, "the ratio once the modes match", 30*time.Second, func() bool {
		m := d.metrics()
		return strings.Contains(m, mismatch+" 0") && value(m, ratio) > 0
	})
}
