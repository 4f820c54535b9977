package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// probeCmdOutput runs `plateau_exporter probe` and returns its exit status,
// stdout and stderr apart: the errors a Slurm prolog or NHC check logs go
// to stderr.
func probeCmdOutput(t *testing.T, cfg string, extra ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"probe", "--config.file=" + cfg, "--probe.hostname=n1"}, extra...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// A baselines file that cannot be read or parsed makes the probe command
// exit 2, naming file, line and field on stderr, with or without
// --allow-missing-baselines: a check that passed without its plateaus
// would pass forever.
func TestProbeCommandExitsTwoOnBadBaselines(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"bad value", "targets:\n  e2e:\n    s:\n      kind: sequential\n      ops:\n        write: {bytes_per_second: lots}\n",
			":6: targets.e2e.s.ops.write.bytes_per_second: must be a non-negative number"},
		{"bad time", "targets:\n  e2e:\n    s:\n      kind: sequential\n      measured_at: 2026-02-30 08:52:31+00:00\n      ops:\n        write: {bytes_per_second: 1}\n",
			`:5: targets.e2e.s.measured_at: invalid time "2026-02-30 08:52:31+00:00": day 30 out of range`},
		{"unknown key", "targets:\n  e2e:\n    s:\n      kind: sequential\n      colour: red\n      ops:\n        write: {bytes_per_second: 1}\n",
			":5: targets.e2e.s.colour: unknown key"},
		{"not YAML", "targets:\n  e2e: [\n", ":2: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			baselines := filepath.Join(t.TempDir(), "baselines.yml")
			cfg := configWithBaselines(t, baselines)
			if err := os.WriteFile(baselines, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, flags := range [][]string{nil, {"--allow-missing-baselines"}} {
				code, stdout, stderr := probeCmdOutput(t, cfg, flags...)
				if code != 2 || !strings.Contains(stderr, baselines+tc.want) || stdout != "" {
					t.Errorf("probe %v: exit %d, want 2 with %q on stderr and no report\nstderr: %s\nstdout: %s", flags, code, baselines+tc.want, stderr, stdout)
				}
			}
		})
	}
}

// A baselines file that does not exist is an error too, unless
// --allow-missing-baselines is given for the first boot: then a warning
// says so and the results are shown without plateaus, exit 0. A path that
// exists but is no readable file is not "missing".
func TestProbeCommandMissingBaselines(t *testing.T) {
	dir := t.TempDir()
	baselines := filepath.Join(dir, "baselines.yml")
	cfg := configWithBaselines(t, baselines)

	code, stdout, stderr := probeCmdOutput(t, cfg)
	if code != 2 || !strings.Contains(stderr, baselines) || !strings.Contains(stderr, "no such file") ||
		!strings.Contains(stderr, "--allow-missing-baselines") || stdout != "" {
		t.Errorf("missing baselines: exit %d, want 2 naming the file and the flag\nstderr: %s\nstdout: %s", code, stderr, stdout)
	}

	code, stdout, stderr = probeCmdOutput(t, cfg, "--allow-missing-baselines")
	if code != 0 || !strings.Contains(stderr, "warning") || !strings.Contains(stderr, baselines) ||
		!strings.Contains(stdout, "no-baseline") || strings.Contains(stdout, "ok") {
		t.Errorf("missing baselines with --allow-missing-baselines: exit %d, want 0, a warning and no-baseline verdicts\nstderr: %s\nstdout: %s", code, stderr, stdout)
	}

	if err := os.Mkdir(baselines, 0o700); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = probeCmdOutput(t, cfg, "--allow-missing-baselines")
	if code != 2 || !strings.Contains(stderr, baselines) || !strings.Contains(stderr, "is a directory") {
		t.Errorf("baselines path is a directory: exit %d, want 2\nstderr: %s", code, stderr)
	}
}

// A config that does not parse exits 2 naming file, line and field.
func TestProbeCommandExitsTwoOnBadConfig(t *testing.T) {
	cfg, _ := writeConfig(t, "{name: s, kind: sequential, file_size: 4MiB, block_size: lots}")
	code, stdout, stderr := probeCmdOutput(t, cfg, "--allow-missing-baselines")
	if code != 2 || !strings.Contains(stderr, cfg+":8: targets[0].probes[0].block_size") || stdout != "" {
		t.Errorf("bad config: exit %d, want 2 naming file, line and field\nstderr: %s\nstdout: %s", code, stderr, stdout)
	}
	missing := filepath.Join(t.TempDir(), "nope.yml")
	if code, _, stderr := probeCmdOutput(t, missing); code != 2 || !strings.Contains(stderr, missing) {
		t.Errorf("missing config: exit %d, want 2 naming it\nstderr: %s", code, stderr)
	}
}

// A baselines file edited with a YAML tool, timestamps in YAML's space
// form, gives the same verdicts and exit status as one characterize wrote.
func TestProbeCommandReadsYAMLToolTimestamps(t *testing.T) {
	baselines := filepath.Join(t.TempDir(), "baselines.yml")
	cfg := configWithBaselines(t, baselines)
	for value, want := range map[string]int{"1": 0, "1.0e+15": 1} {
		b := "targets:\n  e2e:\n    s:\n      kind: sequential\n      measured_at: 2026-12-01 08:52:31+00:00\n      ops:\n" +
			"        write:\n          bytes_per_second: " + value + "\n        read:\n          bytes_per_second: " + value + "\n"
		if err := os.WriteFile(baselines, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, stdout, stderr := probeCmdOutput(t, cfg); code != want {
			t.Errorf("baseline %s B/s: exit %d, want %d\nstderr: %s\nstdout: %s", value, code, want, stderr, stdout)
		}
	}
}
