package characterize

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// A size sweep answers "how small can this probe be and still measure the
// plateau?". It runs the probe at doubling sizes (file_size for sequential,
// segment_size for shared_file, files for metadata, duration for random),
// everything else as configured, and takes the smallest size whose result
// is, on every op, within SizeTolerance of the result at SizeFactor times
// that size. Below that size the probe measures its own start-up (open,
// fsync, the first blocks, the cache of a device) more than the storage.

// SizeTolerance and SizeFactor define a good size: every op's median at
// the size is within SizeTolerance of its median at SizeFactor × the size.
const (
	SizeTolerance = 0.05
	SizeFactor    = 8
	// sizeSteps is how many doublings SizeFactor is.
	sizeSteps = 3
)

// DefaultSizeSweepRuns is how many runs each size's value is the median
// of: three tame a single slow or fast run, and keep the sweep's I/O and
// time at three times one pass over the sizes.
const DefaultSizeSweepRuns = 3

// Smallest sizes a size sweep starts from. Data sizes start at 1 MiB
// (rounded up to a multiple of block_size, as the config requires).
const (
	minSweepBytes    = 1 << 20
	minSweepFiles    = 16
	minSweepDuration = 125 * time.Millisecond
)

// WithSize is the probe with its size key set to size. A variant larger
// than the configured probe gets its timeout scaled likewise, because its
// run takes that much longer (for random, 2 × duration must stay inside
// the timeout); a smaller one keeps the configured timeout.
func WithSize(p *probe.ProbeConfig, size int64) *probe.ProbeConfig {
	v := *p
	switch p.Kind {
	case probe.KindSequential:
		v.FileSize = size
	case probe.KindSharedFile:
		v.SegmentSize = size
	case probe.KindMetadata:
		v.Files = int(size)
	case probe.KindRandom:
		v.Duration = time.Duration(size)
	}
	if conf := plateau.SizeOf(p); conf > 0 && size > conf {
		v.Timeout = time.Duration(math.Ceil(float64(size)/float64(conf))) * p.Timeout
	}
	return &v
}

// Footprint is the space a run of the probe occupies on the file system
// at its peak: the files it writes before removing them, or the random
// probe's kept file.
func Footprint(p *probe.ProbeConfig) int64 {
	switch p.Kind {
	case probe.KindSequential:
		return int64(p.Workers) * p.FileSize
	case probe.KindSharedFile:
		return int64(p.Workers) * p.SegmentSize
	case probe.KindMetadata:
		return int64(p.Workers) * int64(p.Files) * p.FileSize
	case probe.KindRandom:
		return p.FileSize
	}
	return 0
}

// HourlyIO is the I/O the probe costs per hour at its interval, by
// BytesPerRun (what the budget checks before a run).
func HourlyIO(p *probe.ProbeConfig) int64 {
	if p.Interval <= 0 {
		return 0
	}
	return int64(math.Round(float64(probe.BytesPerRun(p)) * float64(time.Hour) / float64(p.Interval)))
}

// SizeLadder is the sizes a sweep of the probe tries: from the smallest
// (1 MiB rounded up to a block, 16 files, 125ms) doubling up to SizeFactor²
// times the configured size, so that sizes up to SizeFactor times the
// configured one can be judged: a probe configured too small finds its
// good size above. SizeSweeper.Plan cuts the ladder to its bounds. Data
// sizes stay multiples of block_size, and files within the config's limit.
func SizeLadder(p *probe.ProbeConfig) []int64 {
	var start int64
	switch p.Kind {
	case probe.KindSequential, probe.KindSharedFile:
		start = minSweepBytes
		if p.BlockSize > 0 {
			start = (minSweepBytes + p.BlockSize - 1) / p.BlockSize * p.BlockSize
		}
	case probe.KindMetadata:
		start = minSweepFiles
	case probe.KindRandom:
		start = int64(minSweepDuration)
	default:
		return nil
	}
	top := max(SizeFactor*SizeFactor*plateau.SizeOf(p), start<<sizeSteps)
	if p.Kind == probe.KindMetadata {
		top = min(top, 1<<20)
	}
	var out []int64
	for s := start; s <= top; s *= 2 {
		out = append(out, s)
	}
	return out
}

// SizeSweep is the result of a probe at doubling sizes.
type SizeSweep struct {
	Target, Probe, Kind string
	// Params is the probe as configured; every step differs from it only
	// in Key.
	Params string
	// Key is the config key swept (SizeKey), Configured its configured
	// value.
	Key        string
	Configured int64
	Interval   time.Duration
	Unit       string
	Ops        []string
	// Runs is how many runs each step is the median of.
	Runs int
	// Capped says why the sweep stopped below the ladder's top ("" when it
	// did not): the I/O bound or the room above min_free_ratio.
	Capped string
	Host   string
	At     time.Time
	Steps  []SizeStep
}

// SizeStep is one size of a sweep.
type SizeStep struct {
	Size int64
	// BytesPerRun is probe.BytesPerRun at this size, HourlyIO that at the
	// configured interval.
	BytesPerRun, HourlyIO int64
	// Moved is the median of the bytes the step's runs actually moved
	// (for random probes, whose I/O depends on the storage's speed).
	Moved int64
	// Values is each op's value in every run of the step.
	Values map[string][]float64
}

// Median is the step's value for op.
func (s SizeStep) Median(op string) float64 { return plateau.Median(s.Values[op]) }

// Judgement says whether a step measured the plateau.
type Judgement struct {
	// Judged is false for a step with no step SizeFactor times larger.
	Judged bool
	Good   bool
	// Ratio is each op's median over its median at SizeFactor × the size.
	Ratio map[string]float64
}

// Judge compares step i with the step SizeFactor times its size.
func (s *SizeSweep) Judge(i int) Judgement {
	j := Judgement{Ratio: map[string]float64{}}
	if i+sizeSteps >= len(s.Steps) {
		return j
	}
	j.Judged, j.Good = true, true
	for _, op := range s.Ops {
		ref := s.Steps[i+sizeSteps].Median(op)
		r := 0.0
		if ref > 0 {
			r = s.Steps[i].Median(op) / ref
		}
		j.Ratio[op] = r
		if !(math.Abs(r-1) <= SizeTolerance) {
			j.Good = false
		}
	}
	return j
}

// Smallest is the index of the smallest good step, or -1 when no judged
// step is good.
func (s *SizeSweep) Smallest() int {
	for i := range s.Steps {
		if j := s.Judge(i); j.Judged && j.Good {
			return i
		}
	}
	return -1
}

// SizeSweeper bounds what a size sweep may cost.
type SizeSweeper struct {
	// Runs is how many runs each size is the median of
	// (DefaultSizeSweepRuns when 0).
	Runs int
	// MaxIO bounds the total BytesPerRun of one probe's sweep; the largest
	// sizes are dropped to stay within it. 0 for no bound. A target's
	// max_bytes_per_hour, when smaller, bounds it too: a sweep is meant to
	// take minutes, and the target's owner allowed that much per hour.
	MaxIO int64
	// Room, when set, says how many bytes the target's file system can
	// take while keeping its min_free_ratio; sizes whose footprint does
	// not fit are dropped. The worker skips any run below min_free_ratio
	// as well, which stops the sweep.
	Room func(t *probe.Target) (int64, error)
	// MaxTime bounds the planned phase time of one probe's sweep where a
	// run's length is set by the config (the random probe: 2 × duration
	// per run), 0 for no bound. Its I/O per run does not grow with the
	// duration, so MaxIO does not bound it.
	MaxTime time.Duration
}

// plannedTime is how long a run's measured phases last by the config, 0
// where the storage's speed decides.
func plannedTime(p *probe.ProbeConfig) time.Duration {
	if p.Kind == probe.KindRandom {
		return 2 * p.Duration
	}
	return 0
}

func (s SizeSweeper) runs() int {
	if s.Runs > 0 {
		return s.Runs
	}
	return DefaultSizeSweepRuns
}

// SizePlan is the sizes one probe's sweep will run and what they cost.
type SizePlan struct {
	Sizes []int64
	// TotalIO is the sum of BytesPerRun over every run planned.
	TotalIO int64
	// Capped says why sizes above the last were dropped, "" when none was.
	Capped string
}

// Plan chooses a probe's sizes within the bounds. It fails when even the
// SizeFactor smallest sizes do not fit, since no size could then be judged.
func (s SizeSweeper) Plan(ref ProbeRef) (SizePlan, error) {
	p, t := ref.Probe, ref.Target
	ladder := SizeLadder(p)
	if len(ladder) == 0 {
		return SizePlan{}, fmt.Errorf("%s/%s: kind %s has no size to sweep", t.Name, p.Name, p.Kind)
	}
	limit, limitName := s.MaxIO, "--size-sweep.max-io"
	if t.MaxBytesPerHour > 0 && (limit <= 0 || t.MaxBytesPerHour < limit) {
		limit, limitName = t.MaxBytesPerHour, "the target's max_bytes_per_hour"
	}
	var room int64 = -1
	if s.Room != nil {
		r, err := s.Room(t)
		if err != nil {
			return SizePlan{}, fmt.Errorf("%s/%s: free space: %w", t.Name, p.Name, err)
		}
		room = r
	}
	runs := int64(s.runs())
	var plan SizePlan
	var planned time.Duration
	for _, size := range ladder {
		v := WithSize(p, size)
		cost := runs * probe.BytesPerRun(v)
		took := time.Duration(runs) * plannedTime(v)
		switch {
		case s.MaxTime > 0 && planned+took > s.MaxTime:
			plan.Capped = fmt.Sprintf("%s=%s would bring the sweep's planned time to %s, over --size-sweep.max-time %s", plateau.SizeKey(p.Kind), plateau.FormatProbeSize(p.Kind, size),
				planned+took, s.MaxTime)
		case limit > 0 && plan.TotalIO+cost > limit:
			plan.Capped = fmt.Sprintf("%s=%s would bring the sweep's I/O to %s, over %s (%s)", plateau.SizeKey(p.Kind), plateau.FormatProbeSize(p.Kind, size),
				probe.FormatSize(plan.TotalIO+cost), limitName, probe.FormatSize(limit))
		case room >= 0 && Footprint(v) > room:
			plan.Capped = fmt.Sprintf("%s=%s needs %s on the file system, more than the %s it has above min_free_ratio", plateau.SizeKey(p.Kind), plateau.FormatProbeSize(p.Kind, size),
				probe.FormatSize(Footprint(v)), probe.FormatSize(room))
		}
		if plan.Capped != "" {
			break
		}
		plan.Sizes = append(plan.Sizes, size)
		plan.TotalIO += cost
		planned += took
	}
	if len(plan.Sizes) <= sizeSteps {
		return plan, fmt.Errorf("%s/%s: size sweep refused: %s, and judging even the smallest size needs the %d sizes up to %dx it", t.Name, p.Name, plan.Capped, sizeSteps+1, SizeFactor)
	}
	return plan, nil
}

// PlanSizes adds the runs of the probes' size sweeps to the count progress
// reports go by (call after Plan). Probes whose sweep is refused count
// nothing.
func (c *Characterizer) PlanSizes(s SizeSweeper, refs []ProbeRef) int {
	n := 0
	for _, r := range refs {
		if plan, err := s.Plan(r); err == nil {
			n += len(plan.Sizes) * s.runs()
		}
	}
	c.total += n
	return n
}

// SkipSizeSweep counts a probe's size sweep runs as done without running
// them, for a probe whose baseline failed.
func (c *Characterizer) SkipSizeSweep(s SizeSweeper, ref ProbeRef) {
	if plan, err := s.Plan(ref); err == nil {
		c.index += len(plan.Sizes) * s.runs()
	}
}

// SweepSizes runs the probe at each planned size, Runs times per size. A
// failed or skipped run (min_free_ratio included) stops the sweep; the
// steps measured so far are returned with the error.
func (c *Characterizer) SweepSizes(ctx context.Context, s SizeSweeper, ref ProbeRef) (*SizeSweep, error) {
	p := ref.Probe
	plan, err := s.Plan(ref)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	runs := s.runs()
	sw := &SizeSweep{
		Target: ref.Target.Name, Probe: p.Name, Kind: p.Kind, Params: plateau.ProbeParams(p),
		Key: plateau.SizeKey(p.Kind), Configured: plateau.SizeOf(p), Interval: p.Interval,
		Unit: probe.OpUnit(p.Kind), Ops: probe.OpsOf(p.Kind), Runs: runs, Capped: plan.Capped,
		Host: c.Hostname, At: now().UTC().Truncate(time.Second),
	}
	for si, size := range plan.Sizes {
		v := WithSize(p, size)
		st := SizeStep{Size: size, BytesPerRun: probe.BytesPerRun(v), HourlyIO: HourlyIO(v), Values: map[string][]float64{}}
		var moved []float64
		step := Step{Total: c.total, Target: ref.Target.Name, Probe: p.Name, Kind: p.Kind, Variable: sw.Key, Level: int(size), Runs: runs}
		for run := 1; run <= runs; run++ {
			step.Run = run
			res, values, err := c.measure(ctx, step, probe.NewRequest(ref.Target, v, c.Hostname), sw.Unit)
			if err != nil {
				c.index += runs - run + (len(plan.Sizes)-si-1)*runs
				return sw, fmt.Errorf("%s/%s: size sweep stopped at %s=%s, run %d of %d: %w", ref.Target.Name, p.Name, sw.Key, plateau.FormatProbeSize(p.Kind, size), run, runs, err)
			}
			for op, val := range values {
				st.Values[op] = append(st.Values[op], val)
			}
			var b int64
			for _, o := range res.Ops {
				b += o.Bytes
			}
			moved = append(moved, float64(b))
		}
		st.Moved = int64(plateau.Median(moved))
		sw.Steps = append(sw.Steps, st)
	}
	return sw, nil
}

// Result is the smallest good size the sweep found, or false when no
// judged size was good.
func (s *SizeSweep) Result() (plateau.MinSize, bool) {
	if s == nil {
		return plateau.MinSize{}, false
	}
	i := s.Smallest()
	if i < 0 {
		return plateau.MinSize{}, false
	}
	return plateau.MinSize{Kind: s.Kind, Key: s.Key, Value: s.Steps[i].Size}, true
}
