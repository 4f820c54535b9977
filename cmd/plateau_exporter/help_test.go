package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// helpFlags runs the binary with args and returns the long flags its help
// lists.
func helpFlags(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--(?:\[no-\])?([a-z][\w.-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("%s lists no flags:\n%s", strings.Join(args, " "), out)
	}
	return flags
}

// TestEachCommandsHelpShowsItsOwnFlags holds every command's help to the
// flags that command reads: the daemon's collector and web flags on serve,
// and none of them on the commands an operator or a script runs by hand.
func TestEachCommandsHelpShowsItsOwnFlags(t *testing.T) {
	serve := helpFlags(t, "serve", "--help")
	for _, f := range []string{"collector.gpfs", "collector.nvme.dev-dir", "web.listen-address", "web.telemetry-path", "config.file", "log.level", "probe.history-file"} {
		if !serve[f] {
			t.Errorf("serve --help does not list --%s", f)
		}
	}
	top := helpFlags(t, "--help")
	if !top["collector.gpfs"] || !top["config.file"] {
		t.Errorf("--help does not list the daemon's flags: %v", top)
	}
	for _, tc := range []struct {
		args     []string
		own, not []string
	}{
		{[]string{"backtest", "--help"}, []string{"input", "rules", "trials", "svg"}, []string{"config.file", "log.level", "probe.hostname"}},
		{[]string{"help", "backtest"}, []string{"input", "rules"}, []string{"config.file"}},
		{[]string{"probe", "--help"}, []string{"target", "probe", "output", "allow-missing-baselines", "config.file", "log.level", "probe.hostname"}, []string{"sweep", "input"}},
		{[]string{"characterize", "--help"}, []string{"runs", "sweep", "size-sweep", "slurm", "config.file", "log.level"}, []string{"allow-missing-baselines", "input"}},
		{[]string{"check-config", "--help"}, []string{"fleet-nodes", "hosts", "config.file", "probe.hostname"}, []string{"runs", "input", "log.level"}},
	} {
		got := helpFlags(t, tc.args...)
		for _, f := range tc.own {
			if !got[f] {
				t.Errorf("%s does not list --%s", strings.Join(tc.args, " "), f)
			}
		}
		for f := range got {
			if strings.HasPrefix(f, "collector.") || strings.HasPrefix(f, "web.") || strings.HasPrefix(f, "path.") {
				t.Errorf("%s lists the daemon's --%s", strings.Join(tc.args, " "), f)
			}
		}
		for _, f := range tc.not {
			if got[f] {
				t.Errorf("%s lists --%s, which it does not read", strings.Join(tc.args, " "), f)
			}
		}
	}
}

// TestSharedFlagsBeforeTheCommand keeps the order scripts may use: the
// shared flags before the command's name still reach the command.
func TestSharedFlagsBeforeTheCommand(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.yml")
	for _, args := range [][]string{
		{"--config.file", missing, "check-config"},
		{"--config.file=" + missing, "probe"},
		{"check-config", "--config.file", missing},
	} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), missing) {
			t.Errorf("%v: exit %d, want 2 naming %s:\n%s", args, code, missing, out)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatalf("%s was created", missing)
	}
}
