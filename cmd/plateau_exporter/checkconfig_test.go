package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkConfigOK runs the binary with args (check-config among them),
// which must exit 0, and returns what it printed.
func checkConfigOK(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, code := runBinary(t, args...)
	if code != 0 {
		t.Fatalf("check-config exited %d:\n%s\n%s", code, out, stderr)
	}
	return out
}

// outputHas fails the test for each of wants that out lacks.
func outputHas(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// check-config prints each target's and the whole config's hourly I/O,
// and warns about a probe smaller than the smallest good size the
// baselines file holds for it (characterize --size-sweep's min_<key>).
func TestCheckConfigHourlyIOAndSmallProbeWarning(t *testing.T) {
	cfg, dir := characterizeConfig(t, "baselines_file: BASE\n",
		"a:    max_bytes_per_hour: 1GiB\n    probes:\n      - {name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB}\n      - {name: md, kind: metadata, workers: 2, files: 64}\n",
		"b:    probes:\n      - {name: seq, kind: sequential, workers: 2, file_size: 8MiB, block_size: 1MiB, interval: 30s, timeout: 20s}\n")
	base := filepath.Join(dir, "baselines.yml")
	data, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(string(data), "BASE", base)), 0o600); err != nil {
		t.Fatal(err)
	}
	baselines := `targets:
  a:
    seq:
      kind: sequential
      min_file_size: 16MiB
      ops:
        write: {bytes_per_second: 1e9}
    md:
      kind: metadata
      min_files: 64
      ops:
        create: {operations_per_second: 1e4}
  b:
    seq:
      kind: sequential
      min_file_size: 8MiB
      ops:
        write: {bytes_per_second: 1e9}
`
	if err := os.WriteFile(base, []byte(baselines), 0o600); err != nil {
		t.Fatal(err)
	}
	out := checkConfigOK(t, "--config.file", cfg, "check-config")
	// a/seq: 2 × 4MiB × 60 = 480MiB; a/md moves no data; b/seq: 2 × 2 ×
	// 8MiB × 120 = 3840MiB.
	outputHas(t, out,
		"target a: 480MiB of I/O per hour (max_bytes_per_hour 1GiB)",
		"target b: 3.8GiB of I/O per hour",
		"all targets: 4.2GiB of I/O per hour",
		"warning: a/seq: file_size 4MiB is below 16MiB, the smallest size that measured the plateau on this target",
	)
	if strings.Count(out, "warning:") != 1 {
		t.Errorf("only a/seq is below its size (md and b/seq are at theirs):\n%s", out)
	}
	// A bad smallest size is a baselines error with file, line and field.
	if err := os.WriteFile(base, []byte(strings.Replace(baselines, "min_files: 64", "min_file_size: 64", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code := runBinary(t, "--config.file", cfg, "check-config")
	if code != 2 || !strings.Contains(out, base+":10: targets.a.md.min_file_size: does not apply to kind metadata") {
		t.Errorf("exit %d, want 2 naming file, line and field:\n%s", code, out)
	}
}

// check-config lists each target a servers list made with its server,
// group and path, and its fleet report says the budget is split.
func TestCheckConfigListsServerTargets(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"ost0", "ost1"} {
		if err := os.Mkdir(filepath.Join(dir, s), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "plateau.yml")
	data := "targets:\n  - name: scratch\n    path: " + dir + "/ost{server}\n    servers: [\"0\", \"1\"]\n" +
		"    fleet: {nodes: 10, max_bytes_per_hour: 20GiB}\n" +
		"    probes:\n      - {name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB, interval: 1m, timeout: 30s}\n"
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	out := checkConfigOK(t, "--config.file", cfg, "check-config")
	// 2 × 4MiB × 60 = 480MiB an hour per node and server target; the share
	// of each is 20GiB / 10 nodes / 2 servers = 1GiB.
	outputHas(t, out,
		"config "+cfg+" is valid: 2 target(s)",
		"target scratch-0 (server 0 of scratch, "+dir+"/ost0): 480MiB of I/O per hour",
		"target scratch-1 (server 1 of scratch, "+dir+"/ost1): 480MiB of I/O per hour",
		"fleet of target scratch-1: 10 nodes",
		"  server 1 of scratch: the fleet block covers its 2 servers' targets together, so each gets 1/2 of its budget",
		"fleet budget 20GiB per hour: a node's share is 1GiB per hour",
	)
	if !strings.Contains(out, "\nscratch-0 ") || !strings.Contains(out, "\nscratch-1 ") {
		t.Errorf("check-config's table lacks a row per server target:\n%s", out)
	}
}
