package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A target path of mode 0777 without the sticky bit: every probe refuses
// it, so check-config must too, with the same words and the target's file
// and line, before a site deploys it. One check, two callers.
func TestCheckConfigRefusesWhatTheProbeRefuses(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "scratch")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	// Mkdir's mode is cut by the umask; chmod sets it whole.
	if err := os.Chmod(target, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "plateau.yml")
	if err := os.WriteFile(cfg, []byte("defaults:\n  interval: 1m\n  timeout: 20s\ntargets:\n  - name: scratch\n    path: "+target+
		"\n    probes:\n      - {name: md, kind: metadata, workers: 1, files: 16, file_size: 0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pout, perr, pcode := runBinary(t, "probe", "--config.file="+cfg, "--probe.hostname=n1")
	if pcode != 2 {
		t.Fatalf("probe exit %d, want 2:\n%s%s", pcode, pout, perr)
	}
	words := regexp.MustCompile(`unsafe probe directory: [^\n]*sticky bit[^\n]*directory`).FindString(pout + perr)
	if words == "" {
		t.Fatalf("probe did not say why it refused:\n%s%s", pout, perr)
	}
	out, errOut, code := runBinary(t, "check-config", "--config.file="+cfg, "--probe.hostname=n1")
	if code != 2 {
		t.Errorf("check-config exit %d on a target every probe refuses, want 2:\n%s%s", code, out, errOut)
	}
	if want := cfg + ":5: targets[0].path: "; !strings.Contains(out, want) || !strings.Contains(out, words) {
		t.Errorf("check-config does not say %q with the probe's words %q:\n%s", want, words, out)
	}
	// check-config leaves nothing behind: neither does the probe.
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("check-config left %d entries in the target", len(entries))
	}

	// With the sticky bit, as /tmp has it, both accept the target.
	if err := os.Chmod(target, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runBinary(t, "check-config", "--config.file="+cfg, "--probe.hostname=n1"); code != 0 || !strings.Contains(out, "passes the probes' own checks") {
		t.Errorf("check-config exit %d on a sticky 1777 target, want 0:\n%s%s", code, out, errOut)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 {
		t.Errorf("check-config left the probe directory it created: %v", entries)
	}
}
