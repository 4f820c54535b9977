package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The sbatch script of the fleet characterization is valid bash, and every
// flag it passes to characterize is one the command has.
func TestCharacterizeSbatchScriptFlagsExist(t *testing.T) {
	const script = "../../packaging/slurm/characterize.sbatch"
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", script, err, out)
	}
	text, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	help, stderr, code := runBinary(t, "characterize", "--help")
	if code != 0 {
		t.Fatalf("characterize --help: exit %d: %s", code, stderr)
	}
	help += stderr
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
