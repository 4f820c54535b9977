// Package characterize measures the plateaus a baselines file holds, on
// a known-good system: baseline runs of each probe, sweeps over workers
// or queue depth and their knee, size sweeps for the smallest probe that
// still measures the plateau, and the Slurm characterization of a whole
// file system from many nodes at once (probe/characterize/slurm), with the
// charts, CSV files and recording rules each writes, the tables it prints
// and its progress line. It runs probes only through the runner cmd hands
// it, and never reaches the daemon's schedule or exposition.
package characterize

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Characterization measures what the probes achieve on a known-good
// system: each probe is run several times as configured and its median
// becomes the baseline; a sweep runs each probe again at 1, 2, 4 ...
// workers (queue depths for random I/O), like the published
// characterizations, to find where the curve flattens.

// Sweep variables: what a sweep doubles.
const (
	VariableWorkers    = "workers"
	VariableQueueDepth = "queue_depth"
)

// ProbeRef names one configured probe of a target.
type ProbeRef struct {
	Target *probe.Target
	Probe  *probe.ProbeConfig
}

// Step is one run of a characterization, as progress reports see it.
type Step struct {
	// Index counts runs from 1 over the whole characterization; Total is
	// the number planned. A probe given up after a failed run skips its
	// remaining runs, so Index can jump.
	Index, Total        int
	Target, Probe, Kind string
	// Variable and Level are set on sweep steps.
	Variable string
	Level    int
	// Run counts from 1 to Runs within the baseline or the sweep step.
	Run, Runs int
	// Started is when the run was started; baseline runs of a probe start
	// at least Spacing apart by this clock reading.
	Started time.Time
	// Confirming is set on the run made again after this run timed out.
	Confirming bool
}

func (s Step) String() string {
	if s.Variable != "" {
		return fmt.Sprintf("%s/%s %s=%d run %d/%d%s", s.Target, s.Probe, s.Variable, s.Level, s.Run, s.Runs, s.again())
	}
	return fmt.Sprintf("%s/%s run %d/%d%s", s.Target, s.Probe, s.Run, s.Runs, s.again())
}

func (s Step) again() string {
	if s.Confirming {
		return " again (it timed out)"
	}
	return ""
}

// Characterizer runs characterizations. One value serves one
// characterization: Plan, then Baseline and Sweep for each probe.
type Characterizer struct {
	// Run runs one request to completion and returns its result; the
	// characterize command isolates each run in a worker process and waits
	// while the daemon holds the target.
	Run      func(ctx context.Context, req probe.Request) *probe.Result
	Hostname string
	// Runs is how many runs a baseline is the median of, at the least.
	// While an op's runs spread more than its target's stability allows
	// (plateau.StableSpread), more runs are made, up to MaxRuns (Runs when
	// smaller); an op still unstable then gets no baseline.
	Runs    int
	MaxRuns int
	// MaxSpread overrides the stability a baseline needs
	// (plateau.StableSpread of the target's warning ratio) when above 0;
	// tests of other things on real, noisy runs set it high.
	MaxSpread float64
	// Spacing is the least time between the starts of a probe's baseline
	// runs. Back-to-back runs catch one moment of the system: on a shared
	// or virtual device that moment can be a fast one, and a baseline
	// above what the system sustains makes alerts fire on a healthy node.
	Spacing time.Duration
	// SweepRuns is how many runs each sweep step is the median of, and
	// MaxLevel the highest worker count a sweep tries. MaxQueueDepth is
	// the highest queue depth a random probe's sweep tries (MaxLevel when
	// 0): queue depth costs no thread or CPU per level the way workers do,
	// and devices reach their IOPS plateau at depths far above a node's
	// sensible worker count.
	SweepRuns     int
	MaxLevel      int
	MaxQueueDepth int
	// OnStart is called before each run and OnDone after it; either may
	// be nil.
	OnStart func(Step)
	OnDone  func(Step, *probe.Result)
	// Now stamps the baselines; time.Now when nil.
	Now func() time.Time

	total, index int
	lastStart    time.Time
}

// Plan counts the runs that characterizing probes takes (with sweeps when
// SweepRuns > 0); progress reports count against it.
func (c *Characterizer) Plan(probes []ProbeRef) int {
	n := 0
	for _, r := range probes {
		n += c.Runs
		if c.SweepRuns > 0 {
			n += len(c.sweepLevels(r.Probe)) * c.SweepRuns
		}
	}
	c.total = n
	c.index = 0
	return n
}

// Baseline runs a probe Runs times as configured and returns each op's
// median and spread. A run that fails or is skipped gives up the probe:
// a median of fewer runs than asked for would pass for a full one.
func (c *Characterizer) Baseline(ctx context.Context, ref ProbeRef) (*plateau.Measured, error) {
	p := ref.Probe
	unit := probe.OpUnit(p.Kind)
	m := &plateau.Measured{Target: ref.Target.Name, Probe: p, Entries: map[string]*plateau.Baseline{}, Values: map[string][]float64{}}
	step := Step{Total: c.total, Target: ref.Target.Name, Probe: p.Name, Kind: p.Kind, Runs: c.Runs}
	var first *probe.Result
	limit := max(c.Runs, c.MaxRuns)
	stable := plateau.StableSpread(ref.Target.WarningRatio)
	if c.MaxSpread > 0 {
		stable = c.MaxSpread
	}
	for run := 1; run <= step.Runs; run++ {
		step.Run = run
		if run > 1 && c.Spacing > 0 {
			if err := probe.Sleep(ctx, time.Until(c.lastStart.Add(c.Spacing))); err != nil {
				c.index += step.Runs - run + 1
				return nil, fmt.Errorf("%s/%s: before run %d of %d: %w", ref.Target.Name, p.Name, run, step.Runs, err)
			}
		}
		res, values, err := c.measure(ctx, step, probe.NewRequest(ref.Target, p, c.Hostname), unit)
		if err != nil {
			c.index += step.Runs - run
			return nil, fmt.Errorf("%s/%s: run %d of %d: %w", ref.Target.Name, p.Name, run, step.Runs, err)
		}
		if first == nil {
			first = res
		}
		// Direct and buffered runs, or libaio and goroutine runs, measure
		// different things; their median describes neither, so the runs
		// left are not worth their I/O.
		if res.Direct != first.Direct {
			c.index += step.Runs - run
			return nil, fmt.Errorf("%s/%s: some runs used O_DIRECT and some did not; characterize again once the file system behaves the same way on every run", ref.Target.Name, p.Name)
		}
		if res.Engine != first.Engine {
			c.index += step.Runs - run
			return nil, fmt.Errorf("%s/%s: runs used engines %s and %s (libaio falls back to goroutines when fs.aio-nr reaches fs.aio-max-nr); characterize again once every run can use the same one", ref.Target.Name, p.Name, first.Engine, res.Engine)
		}
		for op, v := range values {
			m.Values[op] = append(m.Values[op], v)
		}
		// One more run while an op is unstable and the limit allows:
		// the median and its spread firm up with each run, and a burst of
		// other work on the node is outvoted.
		if run == step.Runs && run < limit && len(unstableOps(m.Values, stable)) > 0 {
			step.Runs++
			c.total++
			step.Total = c.total
		}
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	at := now().UTC().Truncate(time.Second)
	unstable := unstableOps(m.Values, stable)
	for op, vs := range m.Values {
		if spread, bad := unstable[op]; bad {
			if m.Unstable == nil {
				m.Unstable = map[string]float64{}
			}
			m.Unstable[op] = spread
			continue
		}
		m.Entries[op] = &plateau.Baseline{
			Kind:  p.Kind,
			Unit:  unit,
			Value: plateau.Median(vs),
			// The robust spread: the range of a few runs is one
			// outlier's (a run that met a burst of other work gave a
			// baseline of steady runs ±78%), and the verdict reads it.
			Spread:     plateau.RobustSpread(vs),
			Runs:       len(vs),
			Method:     "characterize --runs " + strconv.Itoa(len(vs)),
			MeasuredAt: at,
			Host:       c.Hostname,
			Params:     plateau.ProbeParams(p),
			Direct:     strconv.FormatBool(first.Direct),
			Engine:     first.Engine,
		}
	}
	if len(unstable) > 0 {
		ops := make([]string, 0, len(unstable))
		for _, op := range probe.OpsOf(p.Kind) {
			if spread, ok := unstable[op]; ok {
				ops = append(ops, fmt.Sprintf("%s ±%.0f%%", op, 100*spread))
			}
		}
		return m, fmt.Errorf("%s/%s: %w: %s over %d runs, more than the ±%.0f%% a verdict at warning_ratio %.2f needs; "+
			"no baseline written for those ops (an older one is kept). Characterize on a quieter node, with more runs (--max-runs), "+
			"or with a larger probe (file_size, files, duration) whose runs last longer than the node's noise",
			ref.Target.Name, p.Name, ErrUnstable, strings.Join(ops, ", "), step.Runs, 100*stable, ref.Target.WarningRatio)
	}
	return m, nil
}

// ErrUnstable is returned, wrapped, by Baseline when some op's runs spread
// too much for a baseline to carry a verdict.
var ErrUnstable = errors.New("runs too unstable for a baseline")

// unstableOps lists the ops whose runs spread more than stable, with their
// robust spread (plateau.RobustSpread).
func unstableOps(values map[string][]float64, stable float64) map[string]float64 {
	out := map[string]float64{}
	for op, vs := range values {
		if s := plateau.RobustSpread(vs); s > stable {
			out[op] = s
		}
	}
	return out
}

// ResultError says why a run measured nothing, or nil.
func ResultError(res *probe.Result) error {
	switch {
	case res == nil:
		return fmt.Errorf("no result")
	case res.Skipped == probe.SkipTargetBusy:
		return fmt.Errorf("skipped: another probe held the target for longer than this probe's timeout")
	case res.Skipped != "":
		if res.Error != "" {
			return fmt.Errorf("skipped (%s): %s", res.Skipped, res.Error)
		}
		return fmt.Errorf("skipped (%s)", res.Skipped)
	case res.Reason != "":
		return fmt.Errorf("failed (%s): %s", res.Reason, res.Error)
	}
	return nil
}

// OpValues takes each measured op of a result in unit. Results may carry
// phases that are not the kind's ops (the random probe reports the
// preallocation of its file); those are no plateau and are left out.
func OpValues(res *probe.Result, kind, unit string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, op := range probe.OpsOf(kind) {
		o := res.Op(op)
		if o == nil {
			return nil, fmt.Errorf("result has no %q op", op)
		}
		out[op] = o.Value(unit)
	}
	return out, nil
}

// measure runs one step of a characterization and takes each op's value
// in unit; the error says why the run measured nothing.
//
// A run that timed out is made once more before the step counts as
// failed, as the probe command confirms a failing run: the timeout is the
// daemon's, sized for one run of the configured probe, and a run of a
// CPU-bound probe (metadata on a local file system) takes four times as
// long while other work holds the node's cores, so one such burst would
// otherwise end a baseline or a sweep that every other run of it fits.
// Twice in a row is no burst, and is reported as such.
func (c *Characterizer) measure(ctx context.Context, step Step, req probe.Request, unit string) (*probe.Result, map[string]float64, error) {
	res := c.runStep(ctx, step, req)
	if res != nil && res.Reason == probe.ReasonTimeout && ctx.Err() == nil {
		c.total++
		step.Total, step.Confirming = c.total, true
		res = c.runStep(ctx, step, req)
		if err := ResultError(res); err != nil {
			return res, nil, fmt.Errorf("timed out, and again when run once more (timeout %s): %w", req.Probe.Timeout, err)
		}
	}
	if err := ResultError(res); err != nil {
		return res, nil, err
	}
	values, err := OpValues(res, req.Probe.Kind, unit)
	return res, values, err
}

func (c *Characterizer) runStep(ctx context.Context, step Step, req probe.Request) *probe.Result {
	c.index++
	step.Index = c.index
	step.Started = time.Now()
	c.lastStart = step.Started
	if c.OnStart != nil {
		c.OnStart(step)
	}
	res := c.Run(ctx, req)
	if c.OnDone != nil {
		c.OnDone(step, res)
	}
	return res
}

// SweepVariable is what a sweep of the kind doubles: workers where the kind
// has them, else the queue depth (random I/O is one stream of requests with
// queue_depth in flight); "" for a kind with neither.
func SweepVariable(kind string) string {
	switch {
	case probe.HasKey(kind, "workers"):
		return VariableWorkers
	case probe.HasKey(kind, "queue_depth"):
		return VariableQueueDepth
	}
	return ""
}

// SweepLevels are the values a sweep of the probe tries: 1, 2, 4 ... up to
// maxLevel, and no further than the config allows (256 workers, a queue
// depth of 1024 or of 1GiB of buffers).
func SweepLevels(p *probe.ProbeConfig, maxLevel int) []int {
	limit := maxLevel
	switch SweepVariable(p.Kind) {
	case VariableWorkers:
		limit = min(limit, probe.MaxWorkers)
	case VariableQueueDepth:
		limit = min(limit, probe.MaxQueueDepth)
		if p.BlockSize > 0 {
			limit = min(limit, int(probe.MaxRandomBuffers/p.BlockSize))
		}
	default:
		return nil
	}
	var out []int
	for l := 1; l <= limit; l *= 2 {
		out = append(out, l)
	}
	return out
}

// sweepLevels is SweepLevels up to the limit of the probe's variable.
func (c *Characterizer) sweepLevels(p *probe.ProbeConfig) []int {
	if SweepVariable(p.Kind) == VariableQueueDepth && c.MaxQueueDepth > 0 {
		return SweepLevels(p, c.MaxQueueDepth)
	}
	return SweepLevels(p, c.MaxLevel)
}

// sweepVariant is the probe run at one sweep level. Kinds whose work grows
// with workers (every worker moves file_size or creates files) get their
// timeout scaled likewise, because on saturated storage the run takes that
// much longer; the random probe's duration does not depend on its queue
// depth.
func sweepVariant(p *probe.ProbeConfig, level int) *probe.ProbeConfig {
	v := *p
	switch SweepVariable(p.Kind) {
	case VariableWorkers:
		v.Workers = level
		if p.Workers > 0 && level > p.Workers {
			v.Timeout = time.Duration(math.Ceil(float64(level)/float64(p.Workers))) * p.Timeout
		}
	case VariableQueueDepth:
		v.QueueDepth = level
	}
	return &v
}

// Sweep is the curve of one probe over doubling workers or queue depths.
type Sweep struct {
	Target, Probe, Kind string
	// Params is the probe as configured; every step differs from it only
	// in Variable.
	Params string
	// Variable is VariableWorkers or VariableQueueDepth, and Configured
	// its value in the configured probe.
	Variable   string
	Configured int
	Unit       string
	Ops        []string
	// Runs is how many runs each step is the median of.
	Runs  int
	Host  string
	At    time.Time
	Steps []SweepStep
}

// SweepStep is one level of a sweep.
type SweepStep struct {
	Level int
	// Values is each op's value in every run of the step.
	Values map[string][]float64
}

// Median is the step's value for op: the median of its runs.
func (s SweepStep) Median(op string) float64 { return plateau.Median(s.Values[op]) }

// Curve is op's step values (medians), in level order.
func (s *Sweep) Curve(op string) []float64 {
	out := make([]float64, len(s.Steps))
	for i, st := range s.Steps {
		out[i] = st.Median(op)
	}
	return out
}

// Levels lists the levels swept.
func (s *Sweep) Levels() []int {
	out := make([]int, len(s.Steps))
	for i, st := range s.Steps {
		out[i] = st.Level
	}
	return out
}

// OpSummary is one op of a sweep in the shape of the characterizations'
// "maximum and sustained" table.
type OpSummary struct {
	Op string
	// Max is the best step value, reached at MaxLevel.
	Max      float64
	MaxLevel int
	// Sustained is the median of the steps from the knee on (the last
	// step's value when there is no knee).
	Sustained float64
	// Knee is the level where the plateau starts; 0 when the curve was
	// still rising at the last level.
	Knee int
}

// Summary gives each op's maximum, sustained value and knee.
func (s *Sweep) Summary() []OpSummary {
	out := make([]OpSummary, 0, len(s.Ops))
	if len(s.Steps) == 0 {
		return out
	}
	for _, op := range s.Ops {
		curve := s.Curve(op)
		sum := OpSummary{Op: op, Max: math.Inf(-1)}
		for i, v := range curve {
			if v > sum.Max {
				sum.Max, sum.MaxLevel = v, s.Steps[i].Level
			}
		}
		knee := FindKnee(curve)
		if knee >= 0 {
			sum.Knee = s.Steps[knee].Level
		}
		sum.Sustained = Sustained(curve, knee)
		out = append(out, sum)
	}
	return out
}

// Suggest is the level at which a continuous probe reaches the plateau of
// every op: the highest of the ops' knees. rising lists the ops still
// rising at the last level, for which no level of the sweep suffices; level
// is then 0.
func (s *Sweep) Suggest() (level int, rising []string) {
	for _, o := range s.Summary() {
		if o.Knee == 0 {
			rising = append(rising, o.Op)
			continue
		}
		level = max(level, o.Knee)
	}
	if len(rising) > 0 {
		return 0, rising
	}
	return level, nil
}

// SkipSweep counts a probe's sweep runs as done without running them, for
// a probe whose baseline already failed.
func (c *Characterizer) SkipSweep(ref ProbeRef) {
	if c.SweepRuns > 0 {
		c.index += len(c.sweepLevels(ref.Probe)) * c.SweepRuns
	}
}

// Sweep runs the probe at each level of SweepLevels, SweepRuns times per
// level. A failed run stops the sweep: the steps measured so far are
// returned with the error, since they are a valid part of the curve.
func (c *Characterizer) Sweep(ctx context.Context, ref ProbeRef) (*Sweep, error) {
	p := ref.Probe
	variable := SweepVariable(p.Kind)
	if variable == "" {
		return nil, fmt.Errorf("%s/%s: kind %s has neither workers nor queue_depth to sweep", ref.Target.Name, p.Name, p.Kind)
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	sw := &Sweep{
		Target: ref.Target.Name, Probe: p.Name, Kind: p.Kind, Params: plateau.ProbeParams(p),
		Variable: variable, Configured: p.Workers, Unit: probe.OpUnit(p.Kind), Ops: probe.OpsOf(p.Kind),
		Runs: c.SweepRuns, Host: c.Hostname, At: now().UTC().Truncate(time.Second),
	}
	if variable == VariableQueueDepth {
		sw.Configured = p.QueueDepth
	}
	levels := c.sweepLevels(p)
	for li, level := range levels {
		variant := sweepVariant(p, level)
		st := SweepStep{Level: level, Values: map[string][]float64{}}
		step := Step{Total: c.total, Target: ref.Target.Name, Probe: p.Name, Kind: p.Kind, Variable: variable, Level: level, Runs: c.SweepRuns}
		for run := 1; run <= c.SweepRuns; run++ {
			step.Run = run
			_, values, err := c.measure(ctx, step, probe.NewRequest(ref.Target, variant, c.Hostname), sw.Unit)
			if err != nil {
				c.index += c.SweepRuns - run + (len(levels)-li-1)*c.SweepRuns
				return sw, fmt.Errorf("%s/%s: sweep stopped at %s=%d, run %d of %d: %w", ref.Target.Name, p.Name, variable, level, run, c.SweepRuns, err)
			}
			for op, v := range values {
				st.Values[op] = append(st.Values[op], v)
			}
		}
		sw.Steps = append(sw.Steps, st)
	}
	return sw, nil
}
