package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

var fixtureStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "slurm", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// The fixture's four tasks on two nodes each wrote 100 bytes: task 0 from
// 0 to 1s, task 1 to 1.25s, task 2 arrived 300ms after the barrier and ran
// from 0.3s to 1.3s without progress samples, task 3 straggled to 3s.
func TestAggregateStepStragglerAndLateStarter(t *testing.T) {
	res, err := ParseTaskResults(readFixture(t, "write_straggler.out"), 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Task != i {
			t.Fatalf("results not in task order: %d at %d", r.Task, i)
		}
	}
	ops, err := AggregateStep(res, fixtureStart)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 {
		t.Fatalf("got %d ops, want 1", len(ops))
	}
	o := ops[0]
	if o.Op != "write" || o.Tasks != 4 || o.Nodes != 2 || o.Done != 400 {
		t.Errorf("op %s tasks %d nodes %d done %d, want write 4 2 400", o.Op, o.Tasks, o.Nodes, o.Done)
	}
	// IOR's aggregate: all bytes over first start to last end.
	if o.Span != 3*time.Second || !near(o.Aggregate, 400.0/3) {
		t.Errorf("span %s aggregate %g, want 3s and %g", o.Span, o.Aggregate, 400.0/3)
	}
	// Stonewall at 1s, when task 0 finished: 100 + 80 (sample) + 70 (task
	// 2 evenly from 0.3s to 1.3s) + 30 (sample) over the 1s from the
	// first start.
	if !o.Stonewall.Equal(fixtureStart.Add(time.Second)) || !near(o.StonewallDone, 280) || !near(o.Stonewalled, 280) {
		t.Errorf("stonewall %s done %g rate %g, want 1s, 280, 280", o.Stonewall.Sub(fixtureStart), o.StonewallDone, o.Stonewalled)
	}
	if len(o.Late) != 1 || o.Late[0].Task != 2 || o.Late[0].Node != "n1" || o.Late[0].By != 300*time.Millisecond {
		t.Errorf("late %+v, want task 2 on n1 by 300ms", o.Late)
	}
	// Durations 1, 1.25, 1 and 3s: median 1.125s, only task 3 over 1.5x.
	if len(o.Stragglers) != 1 || o.Stragglers[0] != 3 {
		t.Errorf("stragglers %v, want [3]", o.Stragglers)
	}
	if !(o.Stonewalled > o.Aggregate) {
		t.Errorf("a straggler must make the stonewalled value exceed the aggregate: %g <= %g", o.Stonewalled, o.Aggregate)
	}
	rep := &FleetReport{Nodes: []string{"n1", "n2"}, Sweeps: []*FleetSweep{{Target: "s", Probe: "seq", Kind: probe.KindSequential,
		Unit: probe.UnitBytesPerSecond, Ops: []string{"write"}, Steps: []FleetStep{{Workers: 4, StepOp: o}}}}}
	var table bytes.Buffer
	rep.WriteTable(&table)
	if w := "s/seq: 1 step op(s) with tasks late to the start (up to 300ms; raise --slurm.start-delay), 1 with stragglers"; !strings.Contains(table.String(), w) {
		t.Errorf("table does not say %q:\n%s", w, table.String())
	}
}

func TestAggregateStepMetadataWithoutSamples(t *testing.T) {
	res, err := ParseTaskResults(readFixture(t, "metadata_create.out"), 2)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := AggregateStep(res, fixtureStart)
	if err != nil {
		t.Fatal(err)
	}
	o := ops[0]
	// mdtest's rate: 2048 creates over 1s; at the stonewall (0.5s) task 1
	// had done half of its 1024.
	if o.Op != "create" || !near(o.Aggregate, 2048) || !near(o.StonewallDone, 1024+512) || !near(o.Stonewalled, 3072) {
		t.Errorf("got %+v", o)
	}
	if len(o.Late) != 0 || len(o.Stragglers) != 0 {
		t.Errorf("late %v stragglers %v, want none", o.Late, o.Stragglers)
	}
}

func TestParseTaskResultsErrorsNameTheTask(t *testing.T) {
	for _, tc := range []struct {
		file  string
		tasks int
		want  []string
	}{
		{"missing_task.out", 4, []string{"no result from task(s) 2 of 4"}},
		{"failed_task.out", 4, []string{"task 2 on n1: failed: open /scratch", "input/output error"}},
		{"truncated_line.out", 4, []string{"line 4: task result", "no result from task(s) 3 of 4"}},
		{"write_straggler.out", 3, []string{"task 3 is not one of the step's 3 tasks"}},
		{"write_straggler.out", 5, []string{"no result from task(s) 4 of 5"}},
	} {
		_, err := ParseTaskResults(readFixture(t, tc.file), tc.tasks)
		if err == nil {
			t.Errorf("%s with %d tasks: no error", tc.file, tc.tasks)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s with %d tasks: error %q does not say %q", tc.file, tc.tasks, err, w)
			}
		}
	}
	dup := append(readFixture(t, "metadata_create.out"), readFixture(t, "metadata_create.out")...)
	if _, err := ParseTaskResults(dup, 2); err == nil || !strings.Contains(err.Error(), "task 0 reported twice") {
		t.Errorf("duplicate task: %v", err)
	}
}

func TestReadShiftMovesEveryTaskToAnotherNode(t *testing.T) {
	cyclic := func(tasks, nodes int) []string {
		out := make([]string, tasks)
		for i := range out {
			out[i] = fmt.Sprintf("n%d", i%nodes)
		}
		return out
	}
	for _, tc := range []struct{ tasks, nodes int }{{1, 1}, {2, 2}, {4, 1}, {4, 2}, {32, 16}, {256, 16}, {8, 3}, {3, 2}} {
		layout := cyclic(tc.tasks, tc.nodes)
		s := ReadShift(layout)
		for i := range layout {
			if tc.nodes > 1 && tc.tasks > 1 && layout[i] == layout[(i+s)%tc.tasks] && tc.tasks%tc.nodes == 0 {
				t.Errorf("%d tasks on %d nodes: shift %d makes task %d read its own node's data", tc.tasks, tc.nodes, s, i)
			}
		}
	}
	// IOR's shift (tasks per node) would land on the same node here: 256
	// tasks cyclic on 16 nodes, task i and i+16 share a node.
	if s := ReadShift(cyclic(256, 16)); s == 16 {
		t.Errorf("shift 16 on a cyclic layout of 16 nodes reads the own node")
	}
	if s := ReadShift([]string{"a", "a", "a"}); s != 1 {
		t.Errorf("one node: shift %d, want 1", s)
	}
}

func TestFindOutliers(t *testing.T) {
	nodes := []NodeSample{}
	for i, v := range []float64{100, 101, 99, 100, 102, 98, 100, 90, 60} {
		nodes = append(nodes, NodeSample{Node: fmt.Sprintf("n%d", i), Values: map[string]float64{"write": v}})
	}
	out := FindOutliers("write", nodes)
	got := map[string]bool{}
	for _, o := range out {
		got[o.Node] = true
	}
	// n8 is under 0.8x the median; n7 is 10% low, more than 3 scaled MADs
	// (1.48) below; a fast node is never an outlier.
	if len(out) != 2 || !got["n8"] || !got["n7"] {
		t.Errorf("outliers %+v, want n7 and n8", out)
	}
}

// fakeSrun answers sruns as tasks would, from fixed rates, so that the
// coordinator's flow (steps, phases, shifts, files) is tested without
// Slurm.
type fakeSrun struct {
	t     *testing.T
	calls []string
	reqs  []probe.SlurmTaskRequest
	// probes counts the sample runs: alternate ones write at 100 and 50
	// MiB/s.
	probes int
}

func (f *fakeSrun) run(_ context.Context, args []string, env []string) ([]byte, error) {
	f.calls = append(f.calls, strings.Join(args, " "))
	var req probe.SlurmTaskRequest
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, probe.SlurmTaskEnv+"="); ok {
			if err := json.Unmarshal([]byte(v), &req); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	f.reqs = append(f.reqs, req)
	var out bytes.Buffer
	for i := 0; i < req.Tasks; i++ {
		r := probe.SlurmTaskResult{Task: i, Node: fmt.Sprintf("n%d", i%2), Phase: req.Phase, Arrived: req.StartAt.Add(-time.Second)}
		if req.Phase == probe.SlurmPhaseProbe {
			f.probes++
			r.Result = &probe.Result{Ops: []probe.OpResult{{Op: "write", Bytes: 100 << 20, Seconds: float64(1 + f.probes%2)}, {Op: "read", Bytes: 200 << 20, Seconds: 1}}}
			if req.Request.Probe.Kind == probe.KindMetadata {
				r.Result.Ops = nil
				for _, op := range probe.OpsOf(probe.KindMetadata) {
					r.Result.Ops = append(r.Result.Ops, probe.OpResult{Op: op, Operations: 1000, Seconds: 1})
				}
			}
		} else {
			// 100 MiB/s per task up to 4 tasks, then flat.
			secs := math.Max(1, float64(req.Tasks)/4)
			op := req.Phase
			if req.Phase == probe.SlurmPhaseMetadata {
				op = req.Op
			}
			r.Ops = []probe.SlurmTaskOp{{Op: op, Done: 100 << 20, Start: req.StartAt, End: req.StartAt.Add(time.Duration(secs * float64(time.Second)))}}
		}
		js, _ := json.Marshal(r)
		fmt.Fprintf(&out, "%s%s\n", probe.SlurmTaskLinePrefix, js)
	}
	return out.Bytes(), nil
}

type fakeSteps struct{ made, removed int }

func (s *fakeSteps) NewStep(*probe.ProbeConfig) (string, error) {
	s.made++
	return fmt.Sprintf("run.p.1.%d", s.made), nil
}
func (s *fakeSteps) RemoveStep(string) error { s.removed++; return nil }
func (s *fakeSteps) Close() error            { return nil }

func TestFleetCharacterizerFlowAndOutputs(t *testing.T) {
	target := &probe.Target{Name: "scratch", Path: "/scratch/.plateau"}
	seq := &probe.ProbeConfig{Name: "seq", Kind: probe.KindSequential, Workers: 1, FileSize: 100 << 20, BlockSize: 1 << 20, Timeout: time.Minute}
	md := &probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 1, Files: 64, Timeout: time.Minute}
	target.Probes = []*probe.ProbeConfig{seq, md}
	fs := &fakeSrun{t: t}
	steps := &fakeSteps{}
	c := &FleetCharacterizer{Self: "/usr/bin/plateau_exporter", Run: fs.run, Hostname: "login1", Nodes: []string{"n0", "n1"},
		MaxWorkers: 16, StepRuns: 2, StartDelay: time.Second, Sample: 2, SampleRuns: 1,
		Open: func(*probe.Target) (Steps, error) { return steps, nil }}
	rep, err := c.Characterize(context.Background(), []characterize.ProbeRef{{Target: target, Probe: seq}, {Target: target, Probe: md}})
	if err != nil {
		t.Fatal(err)
	}
	// 5 levels of 2 runs: seq 2 sruns each, md 4; then 2 probes x 2
	// nodes sampled.
	if want := 2*(5*2+5*4) + 2*2; len(fs.calls) != want {
		t.Errorf("%d sruns, want %d", len(fs.calls), want)
	}
	if steps.made != 20 || steps.removed != 20 {
		t.Errorf("made %d steps, removed %d, want 20 each", steps.made, steps.removed)
	}
	for i, r := range fs.reqs {
		if r.Phase == probe.SlurmPhaseRead && r.Shift != 1 && r.Tasks > 1 {
			t.Errorf("srun %d: read shift %d on two nodes, want 1", i, r.Shift)
		}
	}
	if !strings.Contains(fs.calls[len(fs.calls)-1], "--nodelist=n1") || !strings.Contains(fs.calls[0], "--distribution=cyclic") {
		t.Errorf("srun arguments: %q ... %q", fs.calls[0], fs.calls[len(fs.calls)-1])
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	for _, w := range []string{"sequential  write", "metadata    create", "workers=4", "node class scratch/seq over 2", "median of 2 run(s) per step"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	dir := t.TempDir()
	ff, err := rep.WriteFiles(dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ff.SVGs) != 2 {
		t.Fatalf("charts %v", ff.SVGs)
	}
	svg, _ := os.ReadFile(ff.SVGs[0])
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Errorf("chart is not XML: %v", err)
	}
	rules, _ := os.ReadFile(ff.Rules)
	for _, w := range []string{"record: plateau:filesystem_plateau_bytes_per_second", `labels: {target: "scratch", op: "write"}`,
		"record: plateau:filesystem_plateau_operations_per_second", `op: "create"`, `expr: "4.194e+08"`} {
		if !strings.Contains(string(rules), w) {
			t.Errorf("rules lack %q:\n%s", w, rules)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", ff.Rules).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	}
	b, err := plateau.LoadBaselines(ff.Baselines)
	if err != nil {
		t.Fatal(err)
	}
	e, why := b.For("scratch", seq, "write")
	if e == nil {
		t.Fatalf("class baseline does not apply to the configured probe: %s", why)
	}
	// Nodes' writes: 100 MiB/s and 50 MiB/s; their median 75 MiB/s.
	if !near(e.Value, 75<<20) || e.Host != "" {
		t.Errorf("class baseline %g host %q, want %d and none", e.Value, e.Host, 75<<20)
	}
	csv, _ := os.ReadFile(ff.CSV)
	if n := strings.Count(string(csv), "\n"); n != 1+2*(5*2+5*4) {
		t.Errorf("CSV has %d lines", n)
	}
}

// FuzzParseTaskResults holds the parser to its contract on any srun
// output: no panic, results in task order with names inside 0..tasks-1,
// or an error.
func FuzzParseTaskResults(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "slurm"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b := readFixture(f, e.Name())
		f.Add(b, 4)
		f.Add(b, 2)
	}
	f.Fuzz(func(t *testing.T, out []byte, tasks int) {
		if tasks > 1<<12 {
			tasks = 1 << 12
		}
		res, err := ParseTaskResults(out, tasks)
		if err != nil {
			return
		}
		if len(res) != tasks {
			t.Fatalf("%d results for %d tasks", len(res), tasks)
		}
		for i, r := range res {
			if r == nil || r.Task != i {
				t.Fatalf("result %d: %+v", i, r)
			}
		}
		if res[0].Phase == probe.SlurmPhaseProbe {
			return
		}
		ops, err := AggregateStep(res, fixtureStart)
		if err != nil {
			return
		}
		for _, o := range ops {
			if o.Aggregate < 0 || o.Stonewalled < 0 || math.IsNaN(o.Aggregate) || math.IsNaN(o.Stonewalled) || o.StonewallDone > float64(o.Done)+1e-6*float64(o.Done) {
				t.Fatalf("op %+v", o)
			}
		}
	})
}
