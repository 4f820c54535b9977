package slurm

import (
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// The generated rule file has exactly the shape dashboards/rules.yml
// reads and dashboards/testdata/site_rules.yml shows: constant recording
// rules of the two contract names with the labels target and op, one per
// target and op (Prometheus would refuse two series of the same labels),
// parsed here by Prometheus's own rule file parser.
func TestPlateauRulesShape(t *testing.T) {
	step := func(workers int, op string, v float64) FleetStep {
		return FleetStep{Workers: workers, StepOp: StepOp{Op: op, Aggregate: v, Stonewalled: v}}
	}
	curve := func(ops ...string) []FleetStep {
		var out []FleetStep
		for i, w := range []int{1, 2, 4, 8} {
			for _, op := range ops {
				out = append(out, step(w, op, float64(min(i+1, 3))*1e9))
			}
		}
		return out
	}
	rep := &FleetReport{Host: "login1", Nodes: []string{"n1"}, Sweeps: []*FleetSweep{
		{Target: "scratch", Probe: "seq", Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Ops: []string{"write", "read"}, Steps: curve("write", "read")},
		{Target: "scratch", Probe: "shared", Kind: probe.KindSharedFile, Unit: probe.UnitBytesPerSecond, Ops: []string{"write", "read"}, Steps: curve("write", "read")[:4]},
		{Target: "scratch", Probe: "md", Kind: probe.KindMetadata, Unit: probe.UnitOpsPerSecond, Ops: probe.OpsOf(probe.KindMetadata), Steps: curve(probe.OpsOf(probe.KindMetadata)...)},
		{Target: "proj", Probe: "seq", Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Ops: []string{"write", "read"}, Steps: curve("write", "read")},
	}}
	path := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(path, rep.PlateauRules(), 0o644); err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%v", errs)
	}
	var got []string
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" || len(r.Labels) != 2 || r.Labels["target"] == "" || r.Labels["op"] == "" {
				t.Errorf("rule %+v: want a recording rule with labels target and op only", r)
			}
			v, err := strconv.ParseFloat(r.Expr, 64)
			if err != nil || !(v > 0) {
				t.Errorf("rule %s %v: expr %q is not a positive constant", r.Record, r.Labels, r.Expr)
			}
			got = append(got, r.Record+" "+r.Labels["target"]+" "+r.Labels["op"]+" "+r.Expr)
		}
	}
	sort.Strings(got)
	want := []string{
		RuleOperationsPerSecond + " scratch create 3.0e+09",
		RuleOperationsPerSecond + " scratch read 3.0e+09",
		RuleOperationsPerSecond + " scratch remove 3.0e+09",
		RuleOperationsPerSecond + " scratch stat 3.0e+09",
		RuleBytesPerSecond + " proj read 3.0e+09",
		RuleBytesPerSecond + " proj write 3.0e+09",
		RuleBytesPerSecond + " scratch read 3.0e+09",
		RuleBytesPerSecond + " scratch write 3.0e+09",
	}
	sort.Strings(want)
	if len(got) != len(want) {
		t.Fatalf("rules:\n%v\nwant:\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rule %d: %q, want %q", i, got[i], want[i])
		}
	}
}
