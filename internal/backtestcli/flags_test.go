package backtestcli

import (
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// The units of --unit are the probe package's, spelled here so that this
// package stays a leaf.
func TestUnitsAreTheProbePackages(t *testing.T) {
	if UnitBytesPerSecond != probe.UnitBytesPerSecond || UnitOpsPerSecond != probe.UnitOpsPerSecond {
		t.Errorf("units %q %q, probe's %q %q", UnitBytesPerSecond, UnitOpsPerSecond, probe.UnitBytesPerSecond, probe.UnitOpsPerSecond)
	}
}

// The same declaration parses alike on an application (plateau_backtest)
// and on a command (plateau_exporter backtest), defaults included.
func TestDeclareParsesOnAnApplicationAndOnACommand(t *testing.T) {
	args := []string{"--input", "runs.csv", "--fleet", "--fs-plateau", "a=1", "--fs-plateau", "b=2", "--reference-rules", "r.yml", "--interval", "1h"}
	app := kingpin.New("plateau_backtest", "")
	onApp := Declare(app)
	if _, err := app.Parse(args); err != nil {
		t.Fatal(err)
	}
	host := kingpin.New("plateau_exporter", "")
	onCmd := Declare(host.Command("backtest", ""))
	if _, err := host.Parse(append([]string{"backtest"}, args...)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*Flags{onApp, onCmd} {
		if f.Input != "runs.csv" || !f.Fleet || len(f.FSPlateau) != 2 || !f.ReferenceSet || f.Interval != time.Hour ||
			f.EvaluationInterval != 5*time.Minute || f.Trials != 100 || f.Unit != UnitBytesPerSecond || len(f.Rules) != 3 {
			t.Errorf("parsed %+v", *f)
		}
	}
	bad := kingpin.New("plateau_backtest", "")
	Declare(bad)
	if _, err := bad.Parse([]string{"--unit", "furlongs"}); err == nil {
		t.Error("--unit furlongs parsed")
	}
}
