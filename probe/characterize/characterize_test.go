package characterize

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/engine"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// recorder runs requests in this process through the real probe code and
// keeps every request and result, so tests can recompute what the
// characterizer should have made of them.
type recorder struct {
	mu      sync.Mutex
	reqs    []probe.Request
	results []*probe.Result
	steps   []Step
	// before, when set, runs before the n-th request (from 1) is executed.
	before func(n int, req probe.Request)
	// after, when set, sees the n-th result before the characterizer does.
	after func(n int, res *probe.Result)
}

func (r *recorder) run(ctx context.Context, req probe.Request) *probe.Result {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	n := len(r.reqs)
	r.mu.Unlock()
	if r.before != nil {
		r.before(n, req)
	}
	res := engine.Execute(ctx, req)
	if r.after != nil {
		r.after(n, res)
	}
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
	return res
}

var characterizeTime = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func newCharacterizer(rec *recorder, runs, sweepRuns, maxLevel int) *Characterizer {
	return &Characterizer{
		Run: rec.run, Hostname: "node1", Runs: runs, SweepRuns: sweepRuns, MaxLevel: maxLevel,
		// Real runs on a shared machine's temp directory: their
		// stability is not what these tests are about (see
		// TestCharacterizeRefusesAnUnstableOp).
		MaxSpread: 1e9,
		OnStart:   func(s Step) { rec.steps = append(rec.steps, s) },
		Now:       func() time.Time { return characterizeTime.Add(123 * time.Millisecond) },
	}
}

func smallMetadata(name string) probe.ProbeConfig {
	return probe.ProbeConfig{Name: name, Kind: probe.KindMetadata, Workers: 2, Files: 64, Interval: time.Minute, Timeout: 30 * time.Second}
}

func targetWith(path string, probes ...probe.ProbeConfig) *probe.Target {
	t := &probe.Target{Name: "t", Path: path, WarningRatio: probe.DefaultWarningRatio, CriticalRatio: probe.DefaultCriticalRatio}
	for i := range probes {
		t.Probes = append(t.Probes, &probes[i])
	}
	return t
}

func TestCharacterizeBaselineIsMedianOfRealRuns(t *testing.T) {
	target := targetWith(t.TempDir(), probefixture.SmallSeq("seq"), smallMetadata("md"))
	rec := &recorder{}
	c := newCharacterizer(rec, 3, 0, 0)
	refs := []ProbeRef{{target, target.Probes[0]}, {target, target.Probes[1]}}
	if total := c.Plan(refs); total != 6 {
		t.Fatalf("Plan = %d runs, want 6", total)
	}
	for i, ref := range refs {
		m, err := c.Baseline(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		p := ref.Probe
		unit := probe.OpUnit(p.Kind)
		results := rec.results[3*i : 3*i+3]
		if got, want := len(m.Entries), len(probe.OpsOf(p.Kind)); got != want {
			t.Fatalf("%s: %d entries, want one per op (%d)", p.Name, got, want)
		}
		for _, op := range probe.OpsOf(p.Kind) {
			var vs []float64
			for _, res := range results {
				if !res.OK() {
					t.Fatalf("%s run failed: %s", p.Name, res.Error)
				}
				vs = append(vs, res.Op(op).Value(unit))
			}
			e := m.Entries[op]
			if e == nil {
				t.Fatalf("%s: no %s baseline", p.Name, op)
			}
			sorted := append([]float64(nil), vs...)
			sort.Float64s(sorted)
			mid := sorted[1]
			if e.Value != mid || !(e.Value > 0) {
				t.Errorf("%s %s: value %g, want the median of %v", p.Name, op, e.Value, vs)
			}
			if want := plateau.RobustSpread(vs); math.Abs(e.Spread-want) > 1e-12 {
				t.Errorf("%s %s: spread %g, want %g", p.Name, op, e.Spread, want)
			}
			if e.Unit != unit || e.Kind != p.Kind || e.Runs != 3 || e.Host != "node1" ||
				e.Method != "characterize --runs 3" || !e.MeasuredAt.Equal(characterizeTime) || e.Params != plateau.ProbeParams(p) ||
				e.Direct != strconv.FormatBool(results[0].Direct) || e.Engine != results[0].Engine || e.Engine == "" {
				t.Errorf("%s %s: entry %+v", p.Name, op, e)
			}
		}
	}
	for i, s := range rec.steps {
		if s.Index != i+1 || s.Total != 6 || s.Run != i%3+1 || s.Runs != 3 || s.Variable != "" {
			t.Errorf("step %d: %+v", i, s)
		}
	}
	if got := rec.steps[4].String(); got != "t/md run 2/3" {
		t.Errorf("step string %q", got)
	}
	// Every run was of the probe exactly as configured.
	for _, req := range rec.reqs {
		if req.Probe.Workers != 2 || req.Hostname != "node1" || req.Target != "t" {
			t.Errorf("request %+v", req)
		}
	}
}

func TestCharacterizeGivesUpAProbeWhoseRunFails(t *testing.T) {
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	broken := targetWith(notADir, probefixture.SmallSeq("seq"))
	good := targetWith(filepath.Join(dir), probefixture.SmallSeq("seq"))
	rec := &recorder{}
	c := newCharacterizer(rec, 3, 0, 0)
	refs := []ProbeRef{{broken, broken.Probes[0]}, {good, good.Probes[0]}}
	c.Plan(refs)
	if m, err := c.Baseline(context.Background(), refs[0]); err == nil || m != nil {
		t.Fatalf("baseline of a failing probe: %+v, %v", m, err)
	} else if !strings.Contains(err.Error(), "t/seq: run 1 of 3: failed") {
		t.Errorf("error does not say which run failed how: %v", err)
	}
	if len(rec.reqs) != 1 {
		t.Errorf("%d runs after the first failed, want none", len(rec.reqs)-1)
	}
	if _, err := c.Baseline(context.Background(), refs[1]); err != nil {
		t.Fatal(err)
	}
	// The skipped runs still count, so progress reaches its total.
	if last := rec.steps[len(rec.steps)-1]; last.Index != 6 || last.Total != 6 {
		t.Errorf("last step %+v, want 6 of 6", last)
	}
}

// Runs that issued their I/O differently measure different things, so
// their median is no baseline. The second run here reports the goroutine
// engine, as a random probe does when io_setup fails because the node's
// AIO contexts ran out (fs.aio-nr at fs.aio-max-nr), which a test cannot
// cause without changing a system-wide sysctl under other tests.
func TestCharacterizeRefusesRunsOfMixedEngines(t *testing.T) {
	target := targetWith(t.TempDir(), probefixture.SmallSeq("seq"))
	rec := &recorder{after: func(n int, res *probe.Result) {
		if n == 2 {
			res.Engine = probe.EngineGoroutines
		}
	}}
	c := newCharacterizer(rec, 3, 0, 0)
	ref := ProbeRef{target, target.Probes[0]}
	c.Plan([]ProbeRef{ref})
	m, err := c.Baseline(context.Background(), ref)
	if err == nil || m != nil {
		t.Fatalf("baseline of runs with engines sync and goroutines: %+v, %v", m, err)
	}
	if !strings.Contains(err.Error(), "t/seq: runs used engines sync and goroutines") || !strings.Contains(err.Error(), "fs.aio-max-nr") {
		t.Errorf("error does not name the engines and the likely cause: %v", err)
	}
	if len(rec.reqs) != 2 {
		t.Errorf("%d runs, want the third left out once the second changed engine", len(rec.reqs))
	}
}

func TestCharacterizeTargetHeldByAnotherProbe(t *testing.T) {
	target := targetWith(t.TempDir(), probefixture.SmallSeq("seq"))
	// Hold the target the way another probe-worker would: the lock file
	// in the host's probe directory.
	dir := filepath.Join(target.Path, "node1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	c := newCharacterizer(&recorder{}, 2, 0, 0)
	c.Plan([]ProbeRef{{target, target.Probes[0]}})
	_, err = c.Baseline(context.Background(), ProbeRef{target, target.Probes[0]})
	if err == nil || !strings.Contains(err.Error(), "another probe held the target") {
		t.Fatalf("want a target-busy error, got %v", err)
	}
}

func TestBaselinesReplaceKeepsOtherEntries(t *testing.T) {
	b := plateau.NewBaselines()
	other := &plateau.Baseline{Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 5e8}
	b.Entries[plateau.BaselineKey{Target: "other", Probe: "seq", Op: "write"}] = other
	b.Entries[plateau.BaselineKey{Target: "t", Probe: "md", Op: "create"}] = &plateau.Baseline{Kind: probe.KindMetadata, Unit: probe.UnitOpsPerSecond, Value: 1000}
	b.Entries[plateau.BaselineKey{Target: "t", Probe: "seq", Op: "write"}] = &plateau.Baseline{Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 1e9}
	// A hand-written entry in another unit cannot be compared.
	b.Entries[plateau.BaselineKey{Target: "t", Probe: "seq", Op: "read"}] = &plateau.Baseline{Kind: probe.KindSequential, Unit: probe.UnitOpsPerSecond, Value: 300}
	p := probefixture.SmallSeq("seq")
	m := &plateau.Measured{Target: "t", Probe: &p, Entries: map[string]*plateau.Baseline{
		"write": {Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 1.1e9, Runs: 3, Params: plateau.ProbeParams(&p)},
		"read":  {Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 2e9, Runs: 3, Params: plateau.ProbeParams(&p)},
	}}
	changes := b.Replace(m)
	if len(changes) != 2 || changes[0].Key.Op != "write" || changes[1].Key.Op != "read" {
		t.Fatalf("changes %+v, want write then read", changes)
	}
	if r, ok := changes[0].Relative(); !ok || math.Abs(r-0.1) > 1e-9 {
		t.Errorf("write changed by %g (%v), want +10%%", r, ok)
	}
	if _, ok := changes[1].Relative(); ok {
		t.Error("a change of unit has no relative change")
	}
	if b.Entries[plateau.BaselineKey{Target: "other", Probe: "seq", Op: "write"}] != other || b.Entries[plateau.BaselineKey{Target: "t", Probe: "md", Op: "create"}] == nil {
		t.Error("entries of other targets or probes were dropped")
	}
	if len(b.Entries) != 4 {
		t.Errorf("%d entries, want 4", len(b.Entries))
	}

	// An op the probe no longer reports is removed and said so; a new op
	// is new.
	md := smallMetadata("md")
	changes = b.Replace(&plateau.Measured{Target: "t", Probe: &md, Entries: map[string]*plateau.Baseline{
		"stat": {Kind: probe.KindMetadata, Unit: probe.UnitOpsPerSecond, Value: 5000},
	}})
	if len(changes) != 2 || changes[0].Key.Op != "create" || changes[0].New != nil || changes[1].Key.Op != "stat" || changes[1].Old != nil {
		t.Fatalf("changes %+v, want create removed and stat new", changes)
	}
	parsed, err := plateau.ParseBaselines(b.Marshal(), "merged")
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.Entries) != len(b.Entries) {
		t.Errorf("round trip kept %d of %d entries", len(parsed.Entries), len(b.Entries))
	}
}

func TestSweepLevelsStayWithinTheConfigLimits(t *testing.T) {
	seq := probefixture.SmallSeq("seq")
	rnd := probe.ProbeConfig{Name: "r", Kind: probe.KindRandom, FileSize: 1 << 30, BlockSize: 4 << 10, QueueDepth: 16, Duration: time.Second, Timeout: 10 * time.Second}
	bigBlocks := rnd
	bigBlocks.BlockSize = 512 << 20
	md := smallMetadata("md")
	for _, tc := range []struct {
		p    *probe.ProbeConfig
		max  int
		want string
	}{
		{&seq, 6, "[1 2 4]"},
		{&seq, 4, "[1 2 4]"},
		{&seq, 1, "[1]"},
		{&seq, 0, "[]"},
		{&seq, 10000, "[1 2 4 8 16 32 64 128 256]"},
		{&md, 8, "[1 2 4 8]"},
		{&rnd, 4096, "[1 2 4 8 16 32 64 128 256 512 1024]"},
		// queue_depth × block_size must stay within 1GiB of buffers.
		{&bigBlocks, 64, "[1 2]"},
	} {
		if got := fmt.Sprint(SweepLevels(tc.p, tc.max)); got != tc.want {
			t.Errorf("SweepLevels(%s, %d) = %s, want %s", tc.p.Kind, tc.max, got, tc.want)
		}
	}
	if SweepVariable(probe.KindSequential) != VariableWorkers || SweepVariable(probe.KindSharedFile) != VariableWorkers ||
		SweepVariable(probe.KindMetadata) != VariableWorkers || SweepVariable(probe.KindRandom) != VariableQueueDepth {
		t.Error("sweep variables: workers for sequential, shared_file and metadata; queue_depth for random")
	}

	// Work grows with workers, so does the timeout; a random run lasts its
	// duration whatever its queue depth.
	one := seq
	one.Workers, one.Timeout = 1, 10*time.Second
	if v := sweepVariant(&one, 4); v.Workers != 4 || v.Timeout != 40*time.Second || one.Workers != 1 {
		t.Errorf("variant at 4 workers of a 1-worker probe: workers %d timeout %s", v.Workers, v.Timeout)
	}
	if v := sweepVariant(&seq, 1); v.Workers != 1 || v.Timeout != seq.Timeout {
		t.Errorf("variant at 1 worker of a 2-worker probe: workers %d timeout %s", v.Workers, v.Timeout)
	}
	if v := sweepVariant(&rnd, 64); v.QueueDepth != 64 || v.Timeout != rnd.Timeout || v.Workers != 0 {
		t.Errorf("random variant at 64: %+v", v)
	}
}

func TestCharacterizeSweepRunsEachLevel(t *testing.T) {
	p := probefixture.SmallSeq("seq")
	p.Workers = 1
	target := targetWith(t.TempDir(), p)
	rec := &recorder{}
	c := newCharacterizer(rec, 1, 2, 2)
	ref := ProbeRef{target, target.Probes[0]}
	if total := c.Plan([]ProbeRef{ref}); total != 1+2*2 {
		t.Fatalf("Plan = %d, want 5", total)
	}
	if _, err := c.Baseline(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	sw, err := c.Sweep(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if sw.Variable != VariableWorkers || sw.Configured != 1 || sw.Params != plateau.ProbeParams(&p) || sw.Unit != probe.UnitBytesPerSecond || sw.Runs != 2 {
		t.Errorf("sweep %+v", sw)
	}
	if len(sw.Steps) != 2 || sw.Steps[0].Level != 1 || sw.Steps[1].Level != 2 {
		t.Fatalf("steps %+v", sw.Steps)
	}
	// Requests: the baseline as configured, then 1, 1, 2, 2 workers.
	var workers []int
	for _, r := range rec.reqs {
		workers = append(workers, r.Probe.Workers)
	}
	if fmt.Sprint(workers) != "[1 1 1 2 2]" {
		t.Errorf("workers per request %v", workers)
	}
	for i, st := range sw.Steps {
		for _, op := range []string{"write", "read"} {
			res := rec.results[1+2*i : 3+2*i]
			want := []float64{res[0].Op(op).BytesPerSecond(), res[1].Op(op).BytesPerSecond()}
			got := st.Values[op]
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("level %d %s: values %v, want %v", st.Level, op, got, want)
			}
			if st.Median(op) != (want[0]+want[1])/2 {
				t.Errorf("level %d %s: median %g", st.Level, op, st.Median(op))
			}
		}
	}
	if s := rec.steps[3]; s.Variable != VariableWorkers || s.Level != 2 || s.Run != 1 || s.Index != 4 || s.String() != "t/seq workers=2 run 1/2" {
		t.Errorf("step %+v (%s)", s, s)
	}
	if sum := sw.Summary(); len(sum) != 2 || sum[0].Op != "write" || !(sum[0].Max > 0) || !(sum[0].Sustained > 0) {
		t.Errorf("summary %+v", sum)
	}
}

func TestCharacterizeSweepStopsAtAFailedStep(t *testing.T) {
	p := probefixture.SmallSeq("seq")
	p.Workers = 1
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	target := targetWith(path, p)
	// The file system goes away before the first run at 2 workers.
	rec := &recorder{before: func(n int, req probe.Request) {
		if n == 3 {
			if err := os.Rename(path, path+".gone"); err != nil {
				t.Error(err)
			}
		}
	}}
	c := newCharacterizer(rec, 1, 2, 4)
	ref := ProbeRef{target, target.Probes[0]}
	c.Plan([]ProbeRef{ref})
	sw, err := c.Sweep(context.Background(), ref)
	if err == nil || !strings.Contains(err.Error(), "sweep stopped at workers=2, run 1 of 2") {
		t.Fatalf("want the sweep stopped at workers=2, got %v", err)
	}
	if sw == nil || len(sw.Steps) != 1 || sw.Steps[0].Level != 1 {
		t.Fatalf("the step measured before the failure must be kept: %+v", sw)
	}
	if len(rec.reqs) != 3 {
		t.Errorf("%d runs, want none after the failure", len(rec.reqs))
	}
	if last := rec.steps[len(rec.steps)-1]; last.Index != 3 {
		t.Errorf("last step started %+v", last)
	}
	// Plan counted one baseline run this test does not make.
	if c.index != c.total-1 {
		t.Errorf("progress at %d of %d after giving up the sweep, want all sweep runs counted", c.index, c.total)
	}
}

// referenceSweep builds a sweep whose step medians are the given curves
// at 1, 2, 4 ... workers, each step of three runs around the median.
func referenceSweep(curves map[string][]float64, ops []string, unit string) *Sweep {
	sw := &Sweep{Target: "scratch", Probe: "seq", Kind: probe.KindSequential, Params: "sequential workers=1 file_size=256MiB block_size=8MiB",
		Variable: VariableWorkers, Configured: 1, Unit: unit, Ops: ops, Runs: 3, Host: "node001", At: characterizeTime}
	for i := range curves[ops[0]] {
		st := SweepStep{Level: 1 << i, Values: map[string][]float64{}}
		for _, op := range ops {
			v := curves[op][i]
			st.Values[op] = []float64{v * 0.98, v, v * 1.01}
		}
		sw.Steps = append(sw.Steps, st)
	}
	return sw
}

func scaled(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
}

func TestSweepSummaryInTheShapeOfTheReferenceTable(t *testing.T) {
	sw := referenceSweep(map[string][]float64{
		"write": scaled(shapeFastRiseFlat, 1e9),
		"read":  scaled(shapePeakDecline, 1e9),
	}, []string{"write", "read"}, probe.UnitBytesPerSecond)
	sum := sw.Summary()
	want := []OpSummary{
		{Op: "write", Max: 20.4e9, MaxLevel: 1024, Sustained: 20.4e9, Knee: 64},
		{Op: "read", Max: 24.8e9, MaxLevel: 16, Sustained: 24.0e9, Knee: 16},
	}
	for i, w := range want {
		g := sum[i]
		if g.Op != w.Op || g.Knee != w.Knee || math.Abs(g.Max/w.Max-1) > 0.005 || math.Abs(g.Sustained/w.Sustained-1) > 0.005 {
			t.Errorf("%s: got %+v, want %+v", w.Op, g, w)
		}
	}
	if level, rising := sw.Suggest(); level != 64 || rising != nil {
		t.Errorf("Suggest = %d, %v; want 64 (the later of the two knees)", level, rising)
	}

	// Random 4 KiB: read grows linearly to 25.6K IOPS at 64 threads; write
	// starts high and flattens near 40K.
	randomWrite := []float64{29.1e3, 33.5e3, 37.0e3, 39.5e3, 40.0e3, 40.1e3, 40.0e3}
	rnd := referenceSweep(map[string][]float64{"read": scaled(shapeLinear, 1e3), "write": randomWrite},
		[]string{"read", "write"}, probe.UnitOpsPerSecond)
	if level, rising := rnd.Suggest(); level != 0 || len(rising) != 1 || rising[0] != "read" {
		t.Errorf("Suggest with read still rising = %d, %v", level, rising)
	}
	if s := rnd.Summary()[0]; s.Knee != 0 || s.Sustained != 25.6e3 || s.Max != 25.6e3 || s.MaxLevel != 64 {
		t.Errorf("linear read: %+v, want no knee, max and sustained 25.6K at 64", s)
	}
	if s := rnd.Summary()[1]; s.Knee != 8 || s.Max != 40.1e3 || s.Sustained != 40.0e3 {
		t.Errorf("random write: %+v, want knee at 8, max 40.1K, sustained 40K", s)
	}
}

// Workers and queue depth have limits of their own: a sweep of workers
// stops at MaxLevel, a random probe's sweep of queue depth at
// MaxQueueDepth, and MaxLevel bounds both when MaxQueueDepth is unset.
func TestSweepLimitsFollowTheSweptVariable(t *testing.T) {
	seq := probefixture.SmallSeq("seq")
	rnd := probe.ProbeConfig{Name: "rnd", Kind: probe.KindRandom, FileSize: 4 << 20, BlockSize: 4 << 10, QueueDepth: 4}
	target := targetWith(t.TempDir(), seq, rnd)
	refs := []ProbeRef{{target, target.Probes[0]}, {target, target.Probes[1]}}
	for _, tc := range []struct {
		maxLevel, maxQueueDepth int
		want                    int
	}{
		{2, 64, (1 + 2) + (1 + 7)}, // workers 1, 2; queue depths 1 … 64
		{4, 8, (1 + 3) + (1 + 4)},  // workers 1, 2, 4; queue depths 1 … 8
		{2, 0, (1 + 2) + (1 + 2)},  // queue depth bounded by MaxLevel
	} {
		c := &Characterizer{Runs: 1, SweepRuns: 1, MaxLevel: tc.maxLevel, MaxQueueDepth: tc.maxQueueDepth, MaxSpread: 1e9}
		if got := c.Plan(refs); got != tc.want {
			t.Errorf("MaxLevel %d, MaxQueueDepth %d: Plan = %d runs, want %d", tc.maxLevel, tc.maxQueueDepth, got, tc.want)
		}
	}
}

// The random probe has no workers: its sweep doubles the queue depth, and
// the preallocation it reports on a first run is no op of its baseline.
func TestCharacterizeRandomSweepsQueueDepth(t *testing.T) {
	p := probe.ProbeConfig{Name: "rnd", Kind: probe.KindRandom, FileSize: 4 << 20, BlockSize: 4 << 10, QueueDepth: 4,
		Duration: 200 * time.Millisecond, Interval: time.Minute, Timeout: 10 * time.Second}
	target := targetWith(t.TempDir(), p)
	rec := &recorder{}
	// The worker limit is 1: the queue depths swept follow their own.
	c := newCharacterizer(rec, 2, 1, 1)
	c.MaxQueueDepth = 2
	ref := ProbeRef{target, target.Probes[0]}
	c.Plan([]ProbeRef{ref})
	m, err := c.Baseline(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if rec.results[0].Op(probe.OpPrealloc) == nil {
		t.Fatalf("first run should have preallocated the file: %+v", rec.results[0].Ops)
	}
	if len(m.Entries) != 2 || m.Entries["read"] == nil || m.Entries["write"] == nil || m.Entries["read"].Unit != probe.UnitOpsPerSecond {
		t.Fatalf("random baseline entries %+v, want read and write in operations per second", m.Entries)
	}
	sw, err := c.Sweep(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if sw.Variable != VariableQueueDepth || sw.Configured != 4 || len(sw.Steps) != 2 {
		t.Fatalf("sweep %+v", sw)
	}
	var qd []int
	for _, r := range rec.reqs[2:] {
		qd = append(qd, r.Probe.QueueDepth)
	}
	if fmt.Sprint(qd) != "[1 2]" {
		t.Errorf("queue depths swept %v, want [1 2]", qd)
	}
	for _, st := range sw.Steps {
		if len(st.Values) != 2 || !(st.Median("read") > 0) || !(st.Median("write") > 0) {
			t.Errorf("level %d: %v", st.Level, st.Values)
		}
	}
}

// Baseline runs of a probe start at least Spacing apart, so the median
// covers a stretch of time rather than one moment of the system.
func TestCharacterizeSpacesBaselineRuns(t *testing.T) {
	target := targetWith(t.TempDir(), probefixture.SmallSeq("seq"))
	rec := &recorder{}
	var starts []time.Time
	c := newCharacterizer(rec, 3, 0, 0)
	c.OnStart = func(s Step) { starts = append(starts, s.Started) }
	c.Spacing = 300 * time.Millisecond
	c.Plan([]ProbeRef{{target, target.Probes[0]}})
	if _, err := c.Baseline(context.Background(), ProbeRef{target, target.Probes[0]}); err != nil {
		t.Fatal(err)
	}
	if len(starts) != 3 {
		t.Fatalf("%d runs, want 3", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < c.Spacing {
			t.Errorf("runs %d and %d started %s apart, less than the spacing %s", i, i+1, gap, c.Spacing)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.Spacing = time.Hour
	if _, err := c.Baseline(ctx, ProbeRef{target, target.Probes[0]}); err == nil {
		t.Error("a cancelled characterization waited out its spacing")
	}
}

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

// A sweep run that times out is made once more: one burst of other work
// on the node must not end the sweep. Two in a row end it and say so.
func TestCharacterizeSweepMakesATimedOutRunOnceMore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeouts []int // requests (from 1) whose result is made a timeout
		wantErr  string
		runs     int
	}{
		// Baseline 1; level 1: 2, 3 (timed out), 4 again; level 2: 5, 6.
		{name: "once", timeouts: []int{3}, runs: 6},
		{name: "twice", timeouts: []int{3, 4}, runs: 4,
			wantErr: "sweep stopped at workers=1, run 2 of 2: timed out, and again when run once more (timeout 30s): failed (timeout)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := probefixture.SmallSeq("seq")
			p.Workers, p.Timeout = 1, 30*time.Second
			target := targetWith(t.TempDir(), p)
			rec := &recorder{after: func(n int, res *probe.Result) {
				if slices.Contains(tc.timeouts, n) {
					res.Fail(context.DeadlineExceeded)
				}
			}}
			c := newCharacterizer(rec, 1, 2, 2)
			ref := ProbeRef{target, target.Probes[0]}
			c.Plan([]ProbeRef{ref})
			if _, err := c.Baseline(context.Background(), ref); err != nil {
				t.Fatal(err)
			}
			sw, err := c.Sweep(context.Background(), ref)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("sweep error %v, want %q", err, tc.wantErr)
			}
			if len(rec.reqs) != tc.runs {
				t.Errorf("%d runs, want %d", len(rec.reqs), tc.runs)
			}
			again := rec.steps[3]
			if !again.Confirming || again.Run != 2 || again.Level != 1 || !strings.HasSuffix(again.String(), "run 2/2 again (it timed out)") {
				t.Errorf("the run made again: %+v (%s)", again, again)
			}
			if tc.wantErr != "" {
				return
			}
			if len(sw.Steps) != 2 || len(sw.Steps[0].Values["write"]) != 2 {
				t.Fatalf("steps %+v", sw.Steps)
			}
			// The timed-out run's values are not among the step's.
			if got, want := sw.Steps[0].Values["write"][1], rec.results[3].Op("write").BytesPerSecond(); got != want {
				t.Errorf("level 1 run 2 is %g, want the run made again (%g)", got, want)
			}
			if c.index != c.total {
				t.Errorf("progress at %d of %d after the sweep", c.index, c.total)
			}
		})
	}
}
