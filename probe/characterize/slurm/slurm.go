package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize"
	"github.com/plateau-exporter/plateau_exporter/probe/chart"
	"github.com/plateau-exporter/plateau_exporter/probe/internal/yamlfield"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Fleet characterization (characterize --slurm) measures the whole file
// system as the published characterizations do: inside a Slurm allocation,
// each step of a sweep runs 1, 2, 4 ... workers as that many Slurm tasks
// spread round-robin over the allocation's nodes (srun
// --distribution=cyclic), each task one worker of the probe's kind doing
// its share of the I/O through the engine's code. The step's value is the
// aggregate of its tasks (see AggregateStep). Optionally the configured
// probe is then run alone on a sample of the nodes, and the nodes' median
// becomes the baselines of the whole node class.

// Steps is the coordinator's side of the step directories; cmd wires
// engine.OpenSlurmSession to it (plateau does no probe I/O itself).
type Steps interface {
	NewStep(p *probe.ProbeConfig) (string, error)
	RemoveStep(name string) error
	Close() error
}

// Srun runs one srun with the given arguments and extra environment
// and returns its stdout; the default is ExecSrun.
type Srun func(ctx context.Context, args []string, env []string) ([]byte, error)

// ExecSrun runs srun (path) and returns its stdout; its stderr goes to
// stderr. An srun that fails still returns its output, whose task lines
// say more than its exit status.
func ExecSrun(path string, stderr io.Writer) Srun {
	return func(ctx context.Context, args []string, env []string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = stderr
		// srun forwards SIGTERM to the step's tasks and waits for them;
		// past WaitDelay it is killed, and slurmd with it kills the step.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 30 * time.Second
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", path, strings.Join(args, " "), err)
		}
		return out, nil
	}
}

// FleetCharacterizer runs a fleet characterization.
type FleetCharacterizer struct {
	// Self is the plateau_exporter the tasks run (`Self slurm-task`).
	Self string
	// Run runs one srun.
	Run Srun
	// Open opens the step directories of a target in the coordinator's
	// probe directory, <path>/<Hostname>/.
	Open     func(t *probe.Target) (Steps, error)
	Hostname string
	// Nodes are the allocation's nodes (scontrol show hostnames
	// $SLURM_JOB_NODELIST).
	Nodes []string
	// MaxWorkers is the largest step: total workers 1, 2, 4 ... up to it.
	MaxWorkers int
	// StepRuns is how many runs each step is the median of (1 when 0).
	StepRuns int
	// StartDelay is how far ahead of srun's launch the start barrier lies:
	// long enough for srun to start every task on every node.
	StartDelay time.Duration
	// Sample is how many nodes the node-class baselines run on (0: none),
	// SampleRuns the runs per node.
	Sample, SampleRuns int
	// Log reports progress; nil for none.
	Log func(format string, args ...any)
	// Now stamps the outputs; time.Now when nil.
	Now func() time.Time
}

// FleetKind reports whether a fleet sweep runs probes of the kind:
// sequential, shared_file and metadata; the others are sampled only.
func FleetKind(kind string) bool {
	switch kind {
	case probe.KindSequential, probe.KindSharedFile, probe.KindMetadata:
		return true
	}
	return false
}

// FleetStep is one step of a fleet sweep: one op at one worker count.
type FleetStep struct {
	Workers int
	// Run counts the step's runs from 1.
	Run int
	StepOp
}

// FleetSweep is one probe's fleet sweep.
type FleetSweep struct {
	Target, Probe, Kind, Params, Unit string
	Ops                               []string
	// Runs is how many runs each step is the median of.
	Runs  int
	Steps []FleetStep
	// Err is why the sweep stopped early; nil when it ran to the end.
	Err error
}

// Curve is the probe's sweep of op as a Sweep over total workers, with
// the aggregate (or, stonewalled, the stonewalled value) of each step, for
// the knee, the table and the chart.
func (f *FleetSweep) Curve(stonewalled bool, host string, at time.Time) *characterize.Sweep {
	sw := &characterize.Sweep{Target: f.Target, Probe: f.Probe, Kind: f.Kind, Params: f.Params + " per task",
		Variable: "workers", Unit: f.Unit, Ops: f.Ops, Runs: max(f.Runs, 1), Host: host, At: at}
	byLevel := map[int]int{}
	for _, st := range f.Steps {
		i, ok := byLevel[st.Workers]
		if !ok {
			i = len(sw.Steps)
			byLevel[st.Workers] = i
			sw.Steps = append(sw.Steps, characterize.SweepStep{Level: st.Workers, Values: map[string][]float64{}})
		}
		v := st.Aggregate
		if stonewalled {
			v = st.Stonewalled
		}
		sw.Steps[i].Values[st.Op] = append(sw.Steps[i].Values[st.Op], v)
	}
	// A level missing an op (a sweep stopped within the level) is no
	// point of the curve.
	keep := sw.Steps[:0]
	for _, st := range sw.Steps {
		if len(st.Values) == len(f.Ops) {
			keep = append(keep, st)
		}
	}
	sw.Steps = keep
	return sw
}

// NodeSample is one node of the node-class sample: each op's median over
// its runs.
type NodeSample struct {
	Node   string
	Values map[string]float64
}

// ClassBaseline is the node-class baselines of one probe.
type ClassBaseline struct {
	Target string
	Probe  *probe.ProbeConfig
	Nodes  []NodeSample
	// Measured holds the class's entries: the median of the nodes and
	// their spread.
	Measured *plateau.Measured
	Outliers []Outlier
	Err      error
}

// Outlier is a sampled node well below the others on an op.
type Outlier struct {
	Node, Op      string
	Value, Median float64
	Ratio         float64
	Why           string
}

// FleetReport is what a fleet characterization measured.
type FleetReport struct {
	Host    string
	At      time.Time
	Nodes   []string
	Sweeps  []*FleetSweep
	Classes []*ClassBaseline
}

func (c *FleetCharacterizer) logf(format string, args ...any) {
	if c.Log != nil {
		c.Log(format, args...)
	}
}

func (c *FleetCharacterizer) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Levels are the sweep's total worker counts.
func (c *FleetCharacterizer) Levels() []int {
	var out []int
	for l := 1; l <= c.MaxWorkers; l *= 2 {
		out = append(out, l)
	}
	return out
}

// Characterize sweeps every probe of refs whose kind is a FleetKind,
// then samples every probe of refs on c.Sample nodes. A step that fails
// stops its probe's sweep (the steps so far are kept); the error returned
// joins every failure, and the report holds what was measured.
func (c *FleetCharacterizer) Characterize(ctx context.Context, refs []characterize.ProbeRef) (*FleetReport, error) {
	if c.MaxWorkers < 1 {
		return nil, fmt.Errorf("max workers must be at least 1, got %d", c.MaxWorkers)
	}
	if len(c.Nodes) == 0 {
		return nil, fmt.Errorf("no nodes in the allocation")
	}
	rep := &FleetReport{Host: c.Hostname, At: c.now().UTC().Truncate(time.Second), Nodes: c.Nodes}
	var errs []error
	byTarget := map[*probe.Target][]characterize.ProbeRef{}
	var targets []*probe.Target
	for _, r := range refs {
		if !FleetKind(r.Probe.Kind) {
			continue
		}
		if byTarget[r.Target] == nil {
			targets = append(targets, r.Target)
		}
		byTarget[r.Target] = append(byTarget[r.Target], r)
	}
	for _, t := range targets {
		steps, err := c.Open(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", t.Name, err))
			continue
		}
		for _, r := range byTarget[t] {
			sw := c.sweep(ctx, steps, r)
			rep.Sweeps = append(rep.Sweeps, sw)
			if sw.Err != nil {
				errs = append(errs, sw.Err)
			}
		}
		if err := steps.Close(); err != nil {
			errs = append(errs, fmt.Errorf("target %s: clean up: %w", t.Name, err))
		}
	}
	if c.Sample > 0 {
		nodes := SampleNodes(c.Nodes, c.Sample)
		for _, r := range refs {
			cb := c.sampleClass(ctx, r, nodes)
			rep.Classes = append(rep.Classes, cb)
			if cb.Err != nil {
				errs = append(errs, cb.Err)
			}
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return rep, errors.Join(errs...)
}

// taskTimeout bounds one task: the probe's timeout, scaled as a one-node
// sweep scales it with the workers beyond the configured ones, plus the
// wait for the barrier.
func (c *FleetCharacterizer) taskTimeout(p *probe.ProbeConfig, workers int) time.Duration {
	t := p.Timeout
	if t <= 0 {
		t = 2 * time.Minute
	}
	if w := max(p.Workers, 1); workers > w {
		t *= time.Duration(math.Ceil(float64(workers) / float64(w)))
	}
	return t + c.StartDelay
}

func (c *FleetCharacterizer) sweep(ctx context.Context, steps Steps, r characterize.ProbeRef) *FleetSweep {
	p := r.Probe
	runs := max(c.StepRuns, 1)
	sw := &FleetSweep{Target: r.Target.Name, Probe: p.Name, Kind: p.Kind, Params: fleetParams(p), Unit: probe.OpUnit(p.Kind), Ops: probe.OpsOf(p.Kind), Runs: runs}
	for _, level := range c.Levels() {
		for run := 1; run <= runs; run++ {
			if err := ctx.Err(); err != nil {
				sw.Err = fmt.Errorf("%s/%s: sweep stopped before workers=%d run %d: %w", r.Target.Name, p.Name, level, run, err)
				return sw
			}
			ops, err := c.step(ctx, steps, r, level)
			for _, o := range ops {
				sw.Steps = append(sw.Steps, FleetStep{Workers: level, Run: run, StepOp: o})
				c.logf("%s/%s workers=%d run %d/%d nodes=%d %s: %s aggregate, %s stonewalled, span %s, %d late, %d straggler(s)\n",
					r.Target.Name, p.Name, level, run, runs, o.Nodes, o.Op, chart.FormatRate(o.Aggregate, sw.Unit), chart.FormatRate(o.Stonewalled, sw.Unit),
					o.Span.Round(time.Millisecond), len(o.Late), len(o.Stragglers))
			}
			if err != nil {
				sw.Err = fmt.Errorf("%s/%s: sweep stopped at workers=%d run %d: %w", r.Target.Name, p.Name, level, run, err)
				return sw
			}
		}
	}
	return sw
}

// fleetParams is ProbeParams without the workers, which a fleet step sets.
func fleetParams(p *probe.ProbeConfig) string {
	var keep []string
	for _, f := range strings.Fields(plateau.ProbeParams(p)) {
		if !strings.HasPrefix(f, "workers=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}

// SrunArgs are srun's arguments for a step of tasks over nodes: one task
// per worker, round-robin over the nodes (cyclic), sharing the
// allocation's CPUs with the coordinator's own step (--overlap: in Slurm
// 22.05 a step otherwise waits for CPUs the batch script holds) and with
// more tasks than CPUs allowed (--overcommit: the sweep goes to 1024
// workers on 16 nodes whatever their cores). nodelist pins the step to
// named nodes ("" for any of the allocation's).
func SrunArgs(self string, nodes, tasks int, nodelist string) []string {
	args := []string{"--nodes=" + strconv.Itoa(nodes), "--ntasks=" + strconv.Itoa(tasks),
		"--distribution=cyclic", "--overlap", "--overcommit", "--kill-on-bad-exit=0",
		"--job-name=plateau-characterize", "--quiet"}
	if nodelist != "" {
		args = append(args, "--nodelist="+nodelist)
	}
	return append(args, self, "slurm-task")
}

// srun runs one phase on req.Tasks tasks over nodes nodes and returns the
// parsed results; it sets the request's start barrier, StartDelay ahead.
func (c *FleetCharacterizer) srun(ctx context.Context, req *probe.SlurmTaskRequest, nodes int, nodelist string, timeout time.Duration) ([]*probe.SlurmTaskResult, error) {
	req.StartAt = time.Now().Add(c.StartDelay).UTC()
	js, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	out, runErr := c.Run(ctx, SrunArgs(c.Self, nodes, req.Tasks, nodelist), []string{probe.SlurmTaskEnv + "=" + string(js)})
	results, err := ParseTaskResults(out, req.Tasks)
	if err != nil {
		return nil, fmt.Errorf("%s phase of %d task(s) on %d node(s): %w", req.Phase, req.Tasks, nodes, errors.Join(runErr, err))
	}
	if runErr != nil {
		return nil, fmt.Errorf("%s phase: %w", req.Phase, runErr)
	}
	return results, nil
}

// step runs one level of a probe's sweep: for the data kinds a write
// phase, then a read phase in a second srun whose tasks read another
// node's data; for metadata one srun per op (mdtest's barriers).
func (c *FleetCharacterizer) step(ctx context.Context, steps Steps, r characterize.ProbeRef, workers int) ([]StepOp, error) {
	p := r.Probe
	nodes := min(workers, len(c.Nodes))
	run, err := steps.NewStep(p)
	if err != nil {
		return nil, err
	}
	defer steps.RemoveStep(run)
	cfg := *p
	cfg.Timeout = c.taskTimeout(p, workers)
	req := probe.SlurmTaskRequest{Target: r.Target.Name, Path: r.Target.Path, Host: c.Hostname, Run: run,
		Probe: cfg, Tasks: workers, Nonce: rand.Uint64()}
	if p.Kind == probe.KindMetadata {
		req.Phase = probe.SlurmPhaseMetadata
		var all []StepOp
		for _, op := range probe.OpsOf(p.Kind) {
			req.Op = op
			res, err := c.srun(ctx, &req, nodes, "", cfg.Timeout)
			if err != nil {
				return all, err
			}
			ops, err := AggregateStep(res, req.StartAt)
			if err != nil {
				return all, err
			}
			all = append(all, ops...)
		}
		return all, nil
	}
	req.Phase = probe.SlurmPhaseWrite
	wres, err := c.srun(ctx, &req, nodes, "", cfg.Timeout)
	if err != nil {
		return nil, err
	}
	wops, err := AggregateStep(wres, req.StartAt)
	if err != nil {
		return nil, err
	}
	layout := make([]string, len(wres))
	for i, t := range wres {
		layout[i] = t.Node
	}
	req.Phase, req.Shift = probe.SlurmPhaseRead, ReadShift(layout)
	rres, err := c.srun(ctx, &req, nodes, "", cfg.Timeout)
	if err != nil {
		return wops, err
	}
	rops, err := AggregateStep(rres, req.StartAt)
	if err != nil {
		return wops, err
	}
	return append(wops, rops...), nil
}

// SampleNodes picks n of the allocation's nodes spread evenly over its
// list (all of them when n is at least their number).
func SampleNodes(nodes []string, n int) []string {
	if n >= len(nodes) {
		return append([]string(nil), nodes...)
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, nodes[i*len(nodes)/n])
	}
	return out
}

// sampleClass runs the configured probe alone on each sampled node,
// SampleRuns times, as the daemon runs it there (in the node's own probe
// directory), and takes the median of the nodes' medians.
func (c *FleetCharacterizer) sampleClass(ctx context.Context, r characterize.ProbeRef, nodes []string) *ClassBaseline {
	p := r.Probe
	cb := &ClassBaseline{Target: r.Target.Name, Probe: p}
	unit := probe.OpUnit(p.Kind)
	var first *probe.Result
	runs := max(c.SampleRuns, 1)
	for _, node := range nodes {
		ns := NodeSample{Node: node, Values: map[string]float64{}}
		values := map[string][]float64{}
		for run := 1; run <= runs; run++ {
			nr := probe.NewRequest(r.Target, p, "")
			req := probe.SlurmTaskRequest{Target: r.Target.Name, Phase: probe.SlurmPhaseProbe, Probe: *p, Tasks: 1, Request: &nr}
			timeout := p.Timeout + c.StartDelay
			req.Probe.Timeout = timeout
			res, err := c.srun(ctx, &req, 1, node, timeout)
			var v map[string]float64
			if err == nil {
				err = characterize.ResultError(res[0].Result)
			}
			if err == nil {
				v, err = characterize.OpValues(res[0].Result, p.Kind, unit)
			}
			if err == nil && first == nil {
				first = res[0].Result
			}
			if err == nil && (res[0].Result.Direct != first.Direct || res[0].Result.Engine != first.Engine) {
				err = fmt.Errorf("ran with direct=%t engine=%s, the first sampled run with direct=%t engine=%s: the nodes are not one class", res[0].Result.Direct, res[0].Result.Engine, first.Direct, first.Engine)
			}
			if err != nil {
				cb.Err = fmt.Errorf("%s/%s: node-class sample on %s, run %d of %d: %w", r.Target.Name, p.Name, node, run, runs, err)
				return cb
			}
			c.logf("%s/%s sample %s run %d/%d done\n", r.Target.Name, p.Name, node, run, runs)
			for op, x := range v {
				values[op] = append(values[op], x)
			}
		}
		for op, vs := range values {
			ns.Values[op] = plateau.Median(vs)
		}
		cb.Nodes = append(cb.Nodes, ns)
	}
	m := &plateau.Measured{Target: r.Target.Name, Probe: p, Entries: map[string]*plateau.Baseline{}, Values: map[string][]float64{}}
	names := make([]string, len(cb.Nodes))
	for i, ns := range cb.Nodes {
		names[i] = ns.Node
	}
	at := c.now().UTC().Truncate(time.Second)
	for _, op := range probe.OpsOf(p.Kind) {
		var vs []float64
		for _, ns := range cb.Nodes {
			vs = append(vs, ns.Values[op])
		}
		m.Values[op] = vs
		m.Entries[op] = &plateau.Baseline{
			Kind: p.Kind, Unit: unit, Value: plateau.Median(vs), Spread: plateau.Spread(vs), Runs: len(vs) * runs,
			Method:     fmt.Sprintf("characterize --slurm --sample %d: median over nodes %s of each node's median of %d run(s)", len(names), strings.Join(names, ","), runs),
			MeasuredAt: at,
			// The entry describes the node class, not one host: no
			// host, so every node of the class loads it as its own.
			Params: plateau.ProbeParams(p), Direct: strconv.FormatBool(first.Direct), Engine: first.Engine,
		}
		cb.Outliers = append(cb.Outliers, FindOutliers(op, cb.Nodes)...)
	}
	cb.Measured = m
	return cb
}

// OutlierRatio and OutlierMADs define a sampled node as an outlier on an
// op: under OutlierRatio of the sample's median, or more than OutlierMADs
// scaled median absolute deviations (1.4826 x MAD, the standard deviation
// of normal noise) below it. The first catches a node far off on a sample
// too small or too uniform for a deviation to mean much; the second a
// node well outside the sample's own noise. Both are robust: one bad node
// moves neither the median nor the MAD, as it would a mean and a standard
// deviation. Only low values are outliers; a node faster than its class
// does not need fixing.
const (
	OutlierRatio = 0.8
	OutlierMADs  = 3.0
)

// FindOutliers lists the nodes below their sample on op. A sample of
// fewer than three nodes has none: the median of two is their mean, and
// which of them is off cannot be told.
func FindOutliers(op string, nodes []NodeSample) []Outlier {
	var vs []float64
	for _, n := range nodes {
		vs = append(vs, n.Values[op])
	}
	if len(vs) < 3 {
		return nil
	}
	med := plateau.Median(vs)
	dev := make([]float64, len(vs))
	for i, v := range vs {
		dev[i] = math.Abs(v - med)
	}
	mad := 1.4826 * plateau.Median(dev)
	var out []Outlier
	for _, n := range nodes {
		v := n.Values[op]
		if !(med > 0) {
			continue
		}
		o := Outlier{Node: n.Node, Op: op, Value: v, Median: med, Ratio: v / med}
		switch {
		case v < OutlierRatio*med:
			o.Why = fmt.Sprintf("under %.0f%% of the median", 100*OutlierRatio)
		case mad > 0 && v < med-OutlierMADs*mad:
			o.Why = fmt.Sprintf("more than %g scaled MADs (%s) below the median", OutlierMADs, chart.FormatNumber(mad))
		default:
			continue
		}
		out = append(out, o)
	}
	return out
}

// WriteTable prints the fleet sweeps in the shape of the characterizations'
// Table 4: per probe and op the maximum (at its workers), the sustained
// plateau and the knee, of the aggregate and of the stonewalled values.
func (rep *FleetReport) WriteTable(w io.Writer) {
	runs := 1
	for _, f := range rep.Sweeps {
		runs = max(runs, f.Runs)
	}
	fmt.Fprintf(w, "\nfleet characterization on %d node(s) (%s), workers round-robin over the nodes, median of %d run(s) per step\n", len(rep.Nodes), strings.Join(rep.Nodes, ","), runs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tPROBE\tKIND\tOP\tMAX\tSUSTAINED\tKNEE\tSTONEWALLED MAX\tSTONEWALLED SUSTAINED")
	for _, f := range rep.Sweeps {
		agg, sw := f.Curve(false, "", rep.At), f.Curve(true, "", rep.At)
		if len(agg.Steps) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\tno complete step\t\t\t\t\n", f.Target, f.Probe, f.Kind)
			continue
		}
		last := agg.Steps[len(agg.Steps)-1].Level
		ss := sw.Summary()
		for i, s := range agg.Summary() {
			knee := fmt.Sprintf("workers=%d", s.Knee)
			if s.Knee == 0 {
				knee = fmt.Sprintf("still rising at %d", last)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s at %d\t%s\t%s\t%s at %d\t%s\n", f.Target, f.Probe, f.Kind, s.Op,
				chart.FormatRate(s.Max, f.Unit), s.MaxLevel, chart.FormatRate(s.Sustained, f.Unit), knee,
				chart.FormatRate(ss[i].Max, f.Unit), ss[i].MaxLevel, chart.FormatRate(ss[i].Sustained, f.Unit))
		}
	}
	tw.Flush()
	for _, f := range rep.Sweeps {
		late, slow := 0, 0
		var worst time.Duration
		for _, s := range f.Steps {
			if len(s.Late) > 0 {
				late++
			}
			for _, l := range s.Late {
				worst = max(worst, l.By)
			}
			if len(s.Stragglers) > 0 {
				slow++
			}
		}
		var notes []string
		if late > 0 {
			notes = append(notes, fmt.Sprintf("%d step op(s) with tasks late to the start (up to %s; raise --slurm.start-delay)", late, worst.Round(time.Millisecond)))
		}
		if slow > 0 {
			notes = append(notes, fmt.Sprintf("%d with stragglers (over %gx the median task's time)", slow, StragglerFactor))
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "%s/%s: %s; see the steps CSV\n", f.Target, f.Probe, strings.Join(notes, ", "))
		}
		if f.Err != nil {
			fmt.Fprintf(w, "incomplete: %v\n", f.Err)
		}
	}
	for _, cb := range rep.Classes {
		if cb.Measured == nil {
			continue
		}
		fmt.Fprintf(w, "\nnode class %s/%s over %d sampled node(s):\n", cb.Target, cb.Probe.Name, len(cb.Nodes))
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OP\tMEDIAN\tSPREAD\tLOWEST")
		for _, op := range probe.OpsOf(cb.Probe.Kind) {
			e := cb.Measured.Entries[op]
			lo, loNode := math.Inf(1), ""
			for _, n := range cb.Nodes {
				if v := n.Values[op]; v < lo {
					lo, loNode = v, n.Node
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t±%.1f%%\t%s on %s\n", op, chart.FormatRate(e.Value, e.Unit), 100*e.Spread, chart.FormatRate(lo, e.Unit), loNode)
		}
		tw.Flush()
		switch {
		case len(cb.Nodes) < 3:
			fmt.Fprintln(w, "outliers: not judged (fewer than 3 nodes sampled)")
		case len(cb.Outliers) == 0:
			fmt.Fprintln(w, "outliers: none")
		}
		for _, o := range cb.Outliers {
			fmt.Fprintf(w, "outlier: %s %s %s = %.2f of the median (%s)\n", o.Node, o.Op, chart.FormatRate(o.Value, probe.OpUnit(cb.Probe.Kind)), o.Ratio, o.Why)
		}
	}
}

// WriteCSV writes every step of every sweep, one row per op:
//
//	target,probe,kind,op,workers,run,nodes,tasks,done,done_unit,span_seconds,aggregate,stonewall_seconds,stonewalled,unit,late,stragglers
func (rep *FleetReport) WriteCSV(w io.Writer) error {
	var sb strings.Builder
	sb.WriteString("target,probe,kind,op,workers,run,nodes,tasks,done,done_unit,span_seconds,aggregate,stonewall_seconds,stonewalled,unit,late,stragglers\n")
	for _, f := range rep.Sweeps {
		doneUnit := "bytes"
		if f.Unit == probe.UnitOpsPerSecond {
			doneUnit = "operations"
		}
		for _, s := range f.Steps {
			fmt.Fprintf(&sb, "%s,%s,%s,%s,%d,%d,%d,%d,%d,%s,%s,%s,%s,%s,%s,%d,%d\n", f.Target, f.Probe, f.Kind, s.Op, s.Workers, s.Run, s.Nodes, s.Tasks,
				s.Done, doneUnit, csvFloat(s.Span.Seconds()), csvFloat(s.Aggregate), csvFloat(s.Stonewall.Sub(s.First).Seconds()), csvFloat(s.Stonewalled),
				f.Unit, len(s.Late), len(s.Stragglers))
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func csvFloat(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// Recording rule names of the aggregate plateau (design.md, fleet).
const (
	RuleBytesPerSecond      = "plateau:filesystem_plateau_bytes_per_second"
	RuleOperationsPerSecond = "plateau:filesystem_plateau_operations_per_second"
)

// PlateauRules renders the sweeps' sustained plateaus as a Prometheus rule
// file of constant recording rules, one per target and op, in the shape
// dashboards/rules.yml reads (labels target and op; a site adds filesystem
// where its GPFS device is not named like the target). Throughput goes to
// RuleBytesPerSecond, metadata rates to RuleOperationsPerSecond. Where
// several probes of a target measure the same op in the same unit (a
// sequential and a shared_file probe both write), the highest sustained
// value is the file system's plateau, and its comment names the probe.
func (rep *FleetReport) PlateauRules() []byte {
	type key struct{ target, record, op string }
	type val struct {
		v           float64
		probe, kind string
		knee        int
	}
	best := map[key]val{}
	var keys []key
	for _, f := range rep.Sweeps {
		record := RuleBytesPerSecond
		if f.Unit == probe.UnitOpsPerSecond {
			record = RuleOperationsPerSecond
		}
		for _, s := range f.Curve(false, "", rep.At).Summary() {
			if !chart.Finite(s.Sustained) || s.Sustained <= 0 {
				continue
			}
			k := key{f.Target, record, s.Op}
			old, ok := best[k]
			if !ok {
				keys = append(keys, k)
			}
			if !ok || s.Sustained > old.v {
				best[k] = val{s.Sustained, f.Probe, f.Kind, s.Knee}
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.target != b.target {
			return a.target < b.target
		}
		if a.record != b.record {
			return a.record < b.record
		}
		return a.op < b.op
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "# The aggregate plateau of the file systems, written by `plateau_exporter characterize --slurm`\n")
	fmt.Fprintf(&sb, "# on %s at %s over %d node(s): each value is the sustained aggregate of a sweep of\n", rep.Host, rep.At.Format(time.RFC3339), len(rep.Nodes))
	fmt.Fprintf(&sb, "# 1..N workers round-robin over the nodes. Load it beside rules.yml and fleet_alerts.yml\n")
	fmt.Fprintf(&sb, "# (rule_files); add a filesystem label where the GPFS device is not named like the target.\n")
	if len(keys) == 0 {
		sb.WriteString("groups: []\n")
		return []byte(sb.String())
	}
	sb.WriteString("groups:\n  - name: site.filesystem_plateaus\n    rules:\n")
	for _, k := range keys {
		v := best[k]
		knee := fmt.Sprintf("knee at workers=%d", v.knee)
		if v.knee == 0 {
			knee = "still rising at the last step"
		}
		fmt.Fprintf(&sb, "      # %s/%s (%s), %s\n", k.target, v.probe, v.kind, knee)
		fmt.Fprintf(&sb, "      - record: %s\n        expr: %q\n        labels: {target: %q, op: %q}\n", k.record, yamlfield.Float(v.v, 4), k.target, k.op)
	}
	return []byte(sb.String())
}

// FleetFiles are the files WriteFiles wrote.
type FleetFiles struct {
	SVGs      []string
	CSV       string
	Rules     string
	Baselines string
	Backup    string
}

// WriteFiles writes into dir each sweep's chart (<target>_<probe>_slurm.svg,
// the aggregate over total workers on a log2 axis), the CSV of every step
// (slurm_steps.csv) and the rule file (rulesPath, default
// dir/filesystem_plateaus.yml); and, when the report has node-class
// baselines, merges them into baselinesPath (default dir/baselines.yml)
// with the baselines file's own writer.
func (rep *FleetReport) WriteFiles(dir, rulesPath, baselinesPath string) (FleetFiles, error) {
	var ff FleetFiles
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ff, fmt.Errorf("output directory: %w", err)
	}
	for _, f := range rep.Sweeps {
		sw := f.Curve(false, fmt.Sprintf("%d node(s), aggregate", len(rep.Nodes)), rep.At)
		if len(sw.Steps) == 0 {
			continue
		}
		p := filepath.Join(dir, f.Target+"_"+f.Probe+"_slurm.svg")
		if err := os.WriteFile(p, sw.SVG(), 0o644); err != nil {
			return ff, fmt.Errorf("write chart: %w", err)
		}
		ff.SVGs = append(ff.SVGs, p)
	}
	var sb strings.Builder
	if err := rep.WriteCSV(&sb); err != nil {
		return ff, err
	}
	ff.CSV = filepath.Join(dir, "slurm_steps.csv")
	if err := os.WriteFile(ff.CSV, []byte(sb.String()), 0o644); err != nil {
		return ff, fmt.Errorf("write steps: %w", err)
	}
	if rulesPath == "" {
		rulesPath = filepath.Join(dir, "filesystem_plateaus.yml")
	}
	if len(rep.Sweeps) > 0 {
		if err := os.WriteFile(rulesPath, rep.PlateauRules(), 0o644); err != nil {
			return ff, fmt.Errorf("write rule file: %w", err)
		}
		ff.Rules = rulesPath
	}
	var measured []*plateau.Measured
	for _, cb := range rep.Classes {
		if cb.Measured != nil {
			measured = append(measured, cb.Measured)
		}
	}
	if len(measured) == 0 {
		return ff, nil
	}
	if baselinesPath == "" {
		baselinesPath = filepath.Join(dir, "baselines.yml")
	}
	b, err := plateau.LoadBaselines(baselinesPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		b = plateau.NewBaselines()
	case err != nil:
		return ff, fmt.Errorf("%w; not overwritten", err)
	}
	for _, m := range measured {
		b.Replace(m)
	}
	backup, err := b.Write(baselinesPath)
	if err != nil {
		return ff, fmt.Errorf("write baselines: %w", err)
	}
	ff.Baselines, ff.Backup = baselinesPath, backup
	return ff, nil
}
