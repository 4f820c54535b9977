package characterize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// A sweep still rising at its last level names the flag that bounds it:
// --max-queue-depth for a random probe, --max-workers otherwise.
func TestSweepStillRisingNamesItsLimitFlag(t *testing.T) {
	for _, tc := range []struct {
		variable, want string
	}{
		{VariableQueueDepth, "the plateau lies beyond --max-queue-depth 4"},
		{VariableWorkers, "the plateau lies beyond --max-workers 4"},
	} {
		sw := &Sweep{Target: "t", Probe: "p", Variable: tc.variable, Configured: 1, Unit: probe.UnitOpsPerSecond, Ops: []string{"read"}, Runs: 1}
		for i, v := range []float64{1000, 2000, 4000} {
			sw.Steps = append(sw.Steps, SweepStep{Level: 1 << i, Values: map[string][]float64{"read": {v}}})
		}
		var out strings.Builder
		SweepReport{Sweep: sw, MaxWorkers: 4, MaxQueueDepth: 4}.WriteTable(&out)
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s sweep rising at its limit:\n%s\nwant %q", tc.variable, out.String(), tc.want)
		}
	}
}

// The rates of every table go through chart.FormatRate.
func TestSweepReportFormatsRatesAndNamesItsFiles(t *testing.T) {
	sw := &Sweep{Target: "t", Probe: "p", Variable: VariableWorkers, Configured: 2, Unit: probe.UnitBytesPerSecond, Ops: []string{"write"}, Runs: 1}
	for i, v := range []float64{1 << 30, 1.5 * (1 << 30), 1.5 * (1 << 30)} {
		sw.Steps = append(sw.Steps, SweepStep{Level: 1 << i, Values: map[string][]float64{"write": {v}}})
	}
	var out strings.Builder
	SweepReport{Sweep: sw, MaxWorkers: 4, SVGPath: "a.svg", CSVPath: "a.csv"}.WriteTable(&out)
	for _, want := range []string{"write  1.5 GiB/s at 2", "suggestion: workers=2, as configured", "chart: a.svg\ndata:  a.csv\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestWrittenReportShowsChangesAndTheDaemonsRunsAgainstBothPlateaus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.json")
	h := plateau.History{{Target: "scratch", Probe: "seq", Op: "read", Params: "p"}: {Results: []float64{4e8, 5e8, 6e8}, Updated: time.Unix(1e9, 0)}}
	if err := plateau.WriteHistoryFile(path, h); err != nil {
		t.Fatal(err)
	}
	changes := []plateau.BaselineChange{{
		Key: plateau.BaselineKey{Target: "scratch", Probe: "seq", Op: "read"},
		Old: &plateau.Baseline{Unit: probe.UnitBytesPerSecond, Value: 1e9},
		New: &plateau.Baseline{Unit: probe.UnitBytesPerSecond, Value: 5e8, Params: "p", Runs: 5, Spread: 0.02},
	}}
	var sb strings.Builder
	NewWrittenReport("b.yml", "b.yml.bak", changes, path).WriteTable(&sb)
	out := sb.String()
	for _, want := range []string{
		"\nwrote b.yml (the previous file is kept as b.yml.bak):\n",
		"scratch  seq    read  954 MiB/s  477 MiB/s  -50.0%  ±2.0%   5\n",
		"the daemon's recent runs (" + path + ")", "RUNS", "0.50", "1.00", "2001-09-09T01:46:40Z",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	sb.Reset()
	NewWrittenReport("b.yml", "", changes, filepath.Join(t.TempDir(), "none.json")).WriteTable(&sb)
	if strings.Contains(sb.String(), "recent") || strings.Contains(sb.String(), "kept") {
		t.Errorf("no history file and no backup, yet printed:\n%s", sb.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	sb.Reset()
	NewWrittenReport("b.yml", "", changes, bad).WriteTable(&sb)
	if !strings.Contains(sb.String(), "\nrecent runs not shown: ") || !strings.Contains(sb.String(), bad) {
		t.Errorf("an unreadable history file is not named:\n%s", sb.String())
	}
}
