package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A probe below its plateau is run once more before probe exits non-zero
// (a prolog drains the node on it), and both runs are printed; one far
// above every result confirms the drop, and the exit is 1. A probe at its
// plateau runs once.
func TestProbeConfirmsADropWithASecondRun(t *testing.T) {
	baselines := filepath.Join(t.TempDir(), "baselines.yml")
	cfg := configWithBaselines(t, baselines)
	writeBaseline(t, baselines, 1e15)
	code, out, stderr := probeCmdOutput(t, cfg)
	if code != 1 {
		t.Fatalf("exit %d against a plateau no run reaches, want 1:\n%s%s", code, out, stderr)
	}
	if strings.Count(out, "[first run; run again to confirm]") != 2 || strings.Count(out, "[second run]") != 2 {
		t.Errorf("want the write and read of both runs, marked:\n%s", out)
	}
	code, out, stderr = probeCmdOutput(t, cfg, "--output=json")
	if code != 1 || strings.Count(out, `"attempt": 1`) != 2 || strings.Count(out, `"attempt": 2`) != 2 {
		t.Errorf("json: exit %d, want 1 with both runs' ops and their attempt:\n%s%s", code, out, stderr)
	}

	writeBaseline(t, baselines, 1)
	code, out, stderr = probeCmdOutput(t, cfg)
	if code != 0 || strings.Contains(out, "run again") || strings.Count(out, "\ne2e") != 2 {
		t.Errorf("exit %d with a plateau every run beats, want 0 from one run:\n%s%s", code, out, stderr)
	}
}
