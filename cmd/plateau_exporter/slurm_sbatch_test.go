package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// bashScript is the text of the shell script at path, which bash -n must
// accept.
func bashScript(t *testing.T, path string) []byte {
	t.Helper()
	if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", path, err, out)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// commandHelp is what `plateau_exporter <command> --help` prints, both
// streams: the flags a script may pass it.
func commandHelp(t *testing.T, command string) string {
	t.Helper()
	help, stderr, code := runBinary(t, command, "--help")
	if code != 0 {
		t.Fatalf("%s --help: exit %d: %s", command, code, stderr)
	}
	return help + stderr
}

// The sbatch script of the fleet characterization is valid bash, and every
// flag it passes to characterize is one the command has.
func TestCharacterizeSbatchScriptFlagsExist(t *testing.T) {
	const script = "../../packaging/slurm/characterize.sbatch"
	text := bashScript(t, script)
	help := commandHelp(t, "characterize")
	// The command line: from the characterize call to the end of its
	// continued lines.
	i := strings.Index(string(text), `"$PLATEAU" --config.file`)
	if i < 0 || !strings.Contains(string(text[i:]), "characterize --slurm") {
		t.Fatalf("%s does not run characterize --slurm", script)
	}
	flags := regexp.MustCompile(`(?m)(?:^|\s)(--[a-z][a-z0-9.-]*)`).FindAllStringSubmatch(string(text[i:]), -1)
	if len(flags) < 5 {
		t.Fatalf("found only %v in the command line", flags)
	}
	for _, f := range flags {
		name := strings.TrimPrefix(f[1], "--")
		if !regexp.MustCompile(`--(\[no-\])?` + regexp.QuoteMeta(name) + `[= \n]`).MatchString(help) {
			t.Errorf("%s passes %s, which characterize does not have", script, f[1])
		}
	}
	for _, sb := range []string{"#SBATCH --nodes=", "#SBATCH --exclusive", "#SBATCH --time="} {
		if !strings.Contains(string(text), sb) {
			t.Errorf("%s lacks %q", script, sb)
		}
	}
}

// The epilog example is valid bash (and shellcheck-clean where shellcheck
// is installed), passes only flags the probe command has, and, run as
// root with a stand-in for the binary: probes as the daemon's user, at most
// once per interval, and exits 0 whatever the probe says, since a failing
// epilog drains the node.
func TestEpilogScript(t *testing.T) {
	const script = "../../packaging/slurm/epilog.sh"
	text := bashScript(t, script)
	if _, err := exec.LookPath("shellcheck"); err == nil {
		if out, err := exec.Command("shellcheck", script).CombinedOutput(); err != nil {
			t.Errorf("shellcheck %s: %v\n%s", script, err, out)
		}
	} else {
		t.Log("shellcheck not installed; only bash -n checked")
	}
	help := commandHelp(t, "probe")
	for _, f := range regexp.MustCompile(`(--(?:config\.file|probe|output|target))=`).FindAllStringSubmatch(string(text), -1) {
		if !strings.Contains(help, f[1]+"=") {
			t.Errorf("%s passes %s, which probe does not have", script, f[1])
		}
	}

	if os.Geteuid() != 0 {
		t.Skip("running the epilog needs root (runuser)")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "plateau_exporter")
	// The stand-in says "below plateau" (exit 1) and records who ran it
	// with which arguments.
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$(id -un) $*\" >>"+calls+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func() {
		t.Helper()
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "PLATEAU="+fake, "PLATEAU_USER=root", "PLATEAU_EPILOG_STAMP="+filepath.Join(dir, "stamp"),
			"PLATEAU_PROBES=seq md", "CONFIG=/etc/test.yml", "SLURM_JOB_ID=42")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("epilog exited with %v (a failing epilog drains the node):\n%s", err, out)
		}
	}
	run()
	run() // within PLATEAU_EPILOG_MIN_INTERVAL: no second probe
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if want := "root --config.file=/etc/test.yml probe --output=json --probe=seq --probe=md\n"; string(got) != want {
		t.Errorf("the epilog ran %q, want %q once", got, want)
	}
}
