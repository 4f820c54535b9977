package characterize

import (
	"context"
	"strings"
	"testing"
	"time"

	"os"
	"path/filepath"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// synthetic answers a run with a rate that approaches plateau as the size
// grows: a fixed start-up cost (overhead, in units of the size) spread
// over the run, as a real probe's open, fsync and first blocks are.
func synthetic(level, overhead float64, reqs *[]probe.Request) func(context.Context, probe.Request) *probe.Result {
	return func(_ context.Context, req probe.Request) *probe.Result {
		*reqs = append(*reqs, req)
		p := req.Probe
		size := float64(plateau.SizeOf(&p))
		rate := level * size / (size + overhead)
		res := &probe.Result{Target: req.Target, Probe: p.Name, Kind: p.Kind, Engine: probe.EngineSync}
		for _, op := range probe.OpsOf(p.Kind) {
			// One second of work at rate: the value is rate in the
			// kind's unit.
			res.Ops = append(res.Ops, probe.OpResult{Op: op, Bytes: int64(rate), Operations: int64(rate), Seconds: 1})
		}
		return res
	}
}

func TestSizeLadderDoublesTo64TimesConfigured(t *testing.T) {
	seq := probefixture.SmallSeq("s") // 1MiB in 256KiB blocks
	seq.FileSize = 4 << 20
	got := SizeLadder(&seq)
	want := []int64{1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20}
	if len(got) != len(want) {
		t.Fatalf("ladder %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ladder %v, want %v", got, want)
		}
	}
	// A block larger than the start rounds the start up to one block.
	seq.BlockSize, seq.FileSize = 3<<20, 3<<20
	if l := SizeLadder(&seq); l[0] != 3<<20 || l[len(l)-1] != 192<<20 || l[len(l)-1]%seq.BlockSize != 0 {
		t.Errorf("ladder with 3MiB blocks = %v", l)
	}
	md := probe.ProbeConfig{Kind: probe.KindMetadata, Workers: 1, Files: 1}
	if l := SizeLadder(&md); l[0] != minSweepFiles || len(l) != sizeSteps+1 {
		t.Errorf("a probe below the start still gets %d sizes to judge one, got %v", sizeSteps+1, l)
	}
	rnd := probe.ProbeConfig{Kind: probe.KindRandom, FileSize: 1 << 20, BlockSize: 4096, QueueDepth: 1, Duration: time.Second, Timeout: 5 * time.Second}
	l := SizeLadder(&rnd)
	if time.Duration(l[0]) != minSweepDuration || time.Duration(l[len(l)-1]) != 64*time.Second {
		t.Errorf("random ladder = %v", l)
	}
	// Every size of the ladder is a valid probe: the timeout grows with
	// the duration.
	for _, s := range l {
		v := WithSize(&rnd, s)
		if 2*v.Duration >= v.Timeout-probe.SelfDeadlineMargin(v.Timeout) {
			t.Errorf("duration %s does not fit timeout %s", v.Duration, v.Timeout)
		}
	}
}

func TestSizeSweepFindsSmallestGoodSizeAndItsCost(t *testing.T) {
	p := probefixture.SmallSeq("s")
	p.Workers, p.FileSize, p.Interval = 1, 8<<20, 30*time.Second
	target := &probe.Target{Name: "t", Path: t.TempDir(), Probes: []*probe.ProbeConfig{&p}}
	ref := ProbeRef{Target: target, Probe: &p}
	var reqs []probe.Request
	// Overhead 0.25MiB: 1MiB reads 0.80 of the plateau and 8MiB 0.97, so
	// 1MiB is off by 18%; 2MiB (0.89 vs 16MiB's 0.985) by 10%; 4MiB (0.94
	// vs 0.992) by 5.3%; 8MiB (0.970 vs 0.996) by 2.6%: 8MiB is the first
	// good size.
	c := &Characterizer{Run: synthetic(1e9, 0.25*(1<<20), &reqs), Hostname: "node1", Now: func() time.Time { return characterizeTime }}
	s := SizeSweeper{Runs: 3}
	c.Plan(nil)
	planned := c.PlanSizes(s, []ProbeRef{ref})
	sw, err := c.SweepSizes(context.Background(), s, ref)
	if err != nil {
		t.Fatal(err)
	}
	if planned != len(reqs) || len(reqs) != 3*len(SizeLadder(&p)) {
		t.Fatalf("planned %d runs, ran %d, ladder %v", planned, len(reqs), SizeLadder(&p))
	}
	for _, r := range reqs {
		if r.Probe.Workers != 1 || r.Probe.BlockSize != p.BlockSize || r.Probe.Interval != p.Interval {
			t.Fatalf("a step changed more than file_size: %+v", r.Probe)
		}
	}
	got, ok := sw.Result()
	if !ok || got.Value != 8<<20 || got.Key != "file_size" || got.String() != "8MiB" {
		t.Fatalf("smallest good size = %+v (%v)", got, ok)
	}
	i := sw.Smallest()
	st := sw.Steps[i]
	v := WithSize(&p, st.Size)
	if st.BytesPerRun != probe.BytesPerRun(v) || st.HourlyIO != probe.BytesPerRun(v)*120 {
		t.Errorf("cost of the chosen size: %d per run, %d per hour; want %d and 120 runs' worth", st.BytesPerRun, st.HourlyIO, probe.BytesPerRun(v))
	}
	for j := range sw.Steps {
		jd := sw.Judge(j)
		if jd.Judged != (j+sizeSteps < len(sw.Steps)) {
			t.Errorf("step %d judged=%v with %d steps", j, jd.Judged, len(sw.Steps))
		}
		if jd.Judged && jd.Good != (j >= i) {
			t.Errorf("step %d (%s) good=%v, ratios %v", j, probe.FormatSize(sw.Steps[j].Size), jd.Good, jd.Ratio)
		}
	}
}

// neverSettles answers a metadata run with a rate that gains 10% at each
// doubling of files: no size is good.
func neverSettles(req probe.Request) *probe.Result {
	res := &probe.Result{Kind: req.Probe.Kind}
	n := int64(1000)
	for f := req.Probe.Files; f > 16; f /= 2 {
		n = n * 11 / 10
	}
	for _, op := range probe.OpsOf(req.Probe.Kind) {
		res.Ops = append(res.Ops, probe.OpResult{Op: op, Operations: n, Seconds: 1})
	}
	return res
}

// A rate that never settles (each doubling gains 10%) has no good size.
func TestSizeSweepWithoutPlateau(t *testing.T) {
	p := probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 1, Files: 32, Interval: time.Minute, Timeout: 30 * time.Second}
	target := &probe.Target{Name: "t", Path: t.TempDir(), Probes: []*probe.ProbeConfig{&p}}
	c := &Characterizer{Run: func(_ context.Context, req probe.Request) *probe.Result { return neverSettles(req) }}
	sw, err := c.SweepSizes(context.Background(), SizeSweeper{Runs: 1}, ProbeRef{target, &p})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sw.Result(); ok {
		t.Fatalf("a rate that grows 10%% per doubling has no good size; got %+v", sw.Steps)
	}
}

func TestSizeSweepBoundsIO(t *testing.T) {
	p := probefixture.SmallSeq("s")
	p.Workers, p.FileSize = 1, 8<<20 // ladder 1MiB ... 512MiB
	target := &probe.Target{Name: "t", Path: t.TempDir()}
	ref := ProbeRef{Target: target, Probe: &p}
	// 3 runs of 2 × size each: 1, 2, 4, 8MiB cost 6 × 15MiB = 90MiB; the
	// 16MiB step would bring it to 186MiB.
	plan, err := SizeSweeper{Runs: 3, MaxIO: 100 << 20}.Plan(ref)
	if err != nil || len(plan.Sizes) != 4 || plan.TotalIO != 90<<20 || !strings.Contains(plan.Capped, "--size-sweep.max-io") {
		t.Fatalf("plan %+v, %v", plan, err)
	}
	// The target's budget bounds it too, and is named.
	target.MaxBytesPerHour = 100 << 20
	if plan, err := (SizeSweeper{Runs: 3, MaxIO: 1 << 30}).Plan(ref); err != nil || len(plan.Sizes) != 4 || !strings.Contains(plan.Capped, "max_bytes_per_hour") {
		t.Fatalf("budget-bound plan %+v, %v", plan, err)
	}
	// Below 4 sizes nothing can be judged: refused, with the reason.
	target.MaxBytesPerHour = 0
	if _, err := (SizeSweeper{Runs: 3, MaxIO: 50 << 20}).Plan(ref); err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "max-io") {
		t.Fatalf("want a refusal, got %v", err)
	}
	// Room above min_free_ratio drops the sizes that would not fit.
	room := func(*probe.Target) (int64, error) { return 20 << 20, nil }
	if plan, err := (SizeSweeper{Runs: 3, Room: room}).Plan(ref); err != nil || plan.Sizes[len(plan.Sizes)-1] != 16<<20 || !strings.Contains(plan.Capped, "min_free_ratio") {
		t.Fatalf("room-bound plan %+v, %v", plan, err)
	}
	// A random probe's sweep is bounded by its planned time: 3 runs of
	// 2 × 125ms, 250ms, 500ms, 1s take 11.25s; 2s would add 12s.
	rnd := probe.ProbeConfig{Name: "r", Kind: probe.KindRandom, FileSize: 1 << 20, BlockSize: 4096, QueueDepth: 1, Duration: time.Second, Timeout: 5 * time.Second}
	if plan, err := (SizeSweeper{Runs: 3, MaxTime: 20 * time.Second}).Plan(ProbeRef{target, &rnd}); err != nil || len(plan.Sizes) != 4 || !strings.Contains(plan.Capped, "max-time") {
		t.Fatalf("time-bound plan %+v, %v", plan, err)
	}
}

// A run skipped for min_free_ratio stops the sweep and says why; the
// steps before it are kept.
func TestSizeSweepStopsOnSkip(t *testing.T) {
	p := probefixture.SmallSeq("s")
	target := &probe.Target{Name: "t", Path: t.TempDir()}
	var reqs []probe.Request
	ok := synthetic(1e9, 1, &reqs)
	c := &Characterizer{Run: func(ctx context.Context, req probe.Request) *probe.Result {
		if req.Probe.FileSize >= 4<<20 {
			return &probe.Result{Skipped: probe.SkipMinFree, Error: "3.0% free is below min_free_ratio 5.0%"}
		}
		return ok(ctx, req)
	}}
	sw, err := c.SweepSizes(context.Background(), SizeSweeper{Runs: 2}, ProbeRef{target, &p})
	if err == nil || !strings.Contains(err.Error(), "min_free") || !strings.Contains(err.Error(), "file_size=4MiB") {
		t.Fatalf("err = %v", err)
	}
	if sw == nil || len(sw.Steps) != 2 {
		t.Fatalf("steps before the skip: %+v", sw)
	}
}

func TestMinSizeInBaselinesFile(t *testing.T) {
	text := probefixture.BaselinesYAML + "" // s is sequential, md metadata
	text = strings.Replace(text, "      method: \"characterize --runs 5\"\n", "      method: \"characterize --runs 5\"\n      min_file_size: 4MiB\n", 1)
	text = strings.Replace(text, "      kind: metadata\n", "      kind: metadata\n      min_files: 256\n", 1)
	b, err := plateau.ParseBaselines([]byte(text), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	seq := probefixture.SmallSeq("s") // 1MiB
	if m, ok := b.MinSizeFor("t", &seq); !ok || m.Value != 4<<20 || m.Line != 11 {
		t.Fatalf("min_file_size = %+v (%v)", m, ok)
	}
	if w := b.BelowMinSize("t", &seq); !strings.Contains(w, "file_size 1MiB is below 4MiB") {
		t.Errorf("warning = %q", w)
	}
	seq.FileSize = 4 << 20
	if w := b.BelowMinSize("t", &seq); w != "" {
		t.Errorf("a probe at the smallest good size warned: %q", w)
	}
	again, err := plateau.ParseBaselines(b.Marshal(), "again.yml")
	if err != nil {
		t.Fatalf("%v\n%s", err, b.Marshal())
	}
	if len(again.MinSizes) != 2 || again.MinSizes[plateau.ProbeKey{Target: "t", Probe: "md"}].Value != 256 || again.MinSizes[plateau.ProbeKey{Target: "t", Probe: "s"}].Value != 4<<20 {
		t.Fatalf("round trip: %+v\n%s", again.MinSizes, b.Marshal())
	}
	// Characterizing the probe again keeps its size.
	m := &plateau.Measured{Target: "t", Probe: &seq, Entries: map[string]*plateau.Baseline{"write": {Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 1}}}
	again.Replace(m)
	if _, ok := again.MinSizeFor("t", &seq); !ok {
		t.Error("Replace dropped the probe's smallest good size")
	}
	rnd := &plateau.Baselines{Entries: map[plateau.BaselineKey]*plateau.Baseline{{Target: "t", Probe: "r", Op: "read"}: {Kind: probe.KindRandom, Unit: probe.UnitOpsPerSecond, Value: 1}}}
	rnd.SetMinSize("t", "r", plateau.MinSize{Kind: probe.KindRandom, Key: "duration", Value: int64(1500 * time.Millisecond)})
	if !strings.Contains(string(rnd.Marshal()), "min_duration: 1.5s\n") {
		t.Errorf("random's size written as:\n%s", rnd.Marshal())
	}
}

func TestBadMinSizeNamesLineAndField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"targets:\n  t:\n    s:\n      kind: sequential\n      min_files: 10\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:5: targets.t.s.min_files: does not apply to kind sequential (its smallest good size is min_file_size)"},
		{"targets:\n  t:\n    s:\n      min_file_size: big\n      kind: sequential\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:4: targets.t.s.min_file_size: "},
		{"targets:\n  t:\n    s:\n      kind: metadata\n      min_files: -3\n      ops:\n        create: {operations_per_second: 1}\n", "b.yml:5: targets.t.s.min_files: must be a positive number of files"},
		{"targets:\n  t:\n    s:\n      kind: random\n      min_duration: 0s\n      ops:\n        read: {operations_per_second: 1}\n", "b.yml:5: targets.t.s.min_duration: must be a positive duration"},
		{"targets:\n  t:\n    s:\n      kind: shared_file\n      min_segment_size: 0\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:5: targets.t.s.min_segment_size: must be a positive size"},
		{"targets:\n  t:\n    s:\n      kind: sequential\n      min_size: 1MiB\n      ops:\n        write: {bytes_per_second: 1}\n", "b.yml:5: targets.t.s.min_size: unknown key"},
		{"targets:\n  t:\n    s:\n      kind: random\n      min_duration: [1s]\n      ops:\n        read: {operations_per_second: 1}\n", "b.yml:5: targets.t.s.min_duration: "},
	} {
		if _, err := plateau.ParseBaselines([]byte(tc.yaml), "b.yml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// SizeSweepAll sweeps only the probes characterized, writes the smallest
// good size it finds, and removes one on file that no longer holds.
func TestSizeSweepAllWritesWhatItFindsAndDropsWhatNoLongerHolds(t *testing.T) {
	seq := probefixture.SmallSeq("s")
	seq.Workers, seq.FileSize, seq.Interval = 1, 8<<20, 30*time.Second
	md := probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 1, Files: 32, Interval: time.Minute, Timeout: 30 * time.Second}
	failed := probefixture.SmallSeq("failed")
	target := &probe.Target{Name: "t", Path: t.TempDir(), Probes: []*probe.ProbeConfig{&seq, &md, &failed}}
	refs := []ProbeRef{{target, &seq}, {target, &md}, {target, &failed}}

	var reqs []probe.Request
	settles := synthetic(1e9, 0.25*(1<<20), &reqs)
	c := &Characterizer{Run: func(ctx context.Context, req probe.Request) *probe.Result {
		if req.Probe.Kind == probe.KindSequential {
			return settles(ctx, req)
		}
		return neverSettles(req)
	}}
	// The file holds the plateaus the sizes go beside.
	b := plateau.NewBaselines()
	b.Entries[plateau.BaselineKey{Target: "t", Probe: "s", Op: "write"}] = &plateau.Baseline{Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 1e9}
	b.Entries[plateau.BaselineKey{Target: "t", Probe: "md", Op: "stat"}] = &plateau.Baseline{Kind: probe.KindMetadata, Unit: probe.UnitOpsPerSecond, Value: 1e3}
	b.SetMinSize("t", "md", plateau.MinSize{Kind: probe.KindMetadata, Key: "files", Value: 256})
	path := filepath.Join(t.TempDir(), "baselines.yml")
	var reports []SizeSweepReport
	var written string
	err := c.SizeSweepAll(context.Background(), refs, SizeSession{
		Sizer: SizeSweeper{Runs: 1}, Baselines: b, Path: path,
		Characterized: CharacterizedIn([]plateau.BaselineChange{
			{Key: plateau.BaselineKey{Target: "t", Probe: "s", Op: "write"}, New: &plateau.Baseline{}},
			{Key: plateau.BaselineKey{Target: "t", Probe: "md", Op: "stat"}, New: &plateau.Baseline{}},
			{Key: plateau.BaselineKey{Target: "t", Probe: "failed", Op: "write"}, Old: &plateau.Baseline{}},
		}),
		OnSwept:   func(r SizeSweepReport) { reports = append(reports, r) },
		OnWritten: func(path, _ string) { written = path },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 3 || reports[0].NotSwept || reports[1].NotSwept || !reports[2].NotSwept {
		t.Fatalf("reports %+v", reports)
	}
	if written != path {
		t.Fatalf("written %q, want %q", written, path)
	}
	got, err := plateau.LoadBaselines(path)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := got.MinSizes[plateau.ProbeKey{Target: "t", Probe: "s"}]; !ok || m.Value != 8<<20 {
		t.Errorf("min sizes on file %+v, want s at 8MiB", got.MinSizes)
	}
	if _, ok := got.MinSizes[plateau.ProbeKey{Target: "t", Probe: "md"}]; ok {
		t.Errorf("md's size that no longer holds is still on file: %+v", got.MinSizes)
	}
	var out strings.Builder
	for _, r := range reports {
		r.WriteTable(&out)
	}
	for _, want := range []string{
		"\nsize sweep of t/s (", "smallest good file_size: 8MiB, ",
		"\nsize sweep of t/md (", "smallest good files: none up to ", "the min_files on file for it was removed\n",
		"\nno size sweep of t/failed: its baseline runs failed\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("reports lack %q:\n%s", want, out.String())
		}
	}
}

// A sweep that stops early is incomplete; what it found before is kept
// and nothing is written.
func TestSizeSweepAllStopsOnSkipAndWritesNothing(t *testing.T) {
	p := probefixture.SmallSeq("s")
	target := &probe.Target{Name: "t", Path: t.TempDir()}
	c := &Characterizer{Run: func(context.Context, probe.Request) *probe.Result {
		return &probe.Result{Skipped: probe.SkipMinFree, Error: "3.0% free is below min_free_ratio 5.0%"}
	}}
	path := filepath.Join(t.TempDir(), "baselines.yml")
	var reports []SizeSweepReport
	err := c.SizeSweepAll(context.Background(), []ProbeRef{{target, &p}}, SizeSession{
		Sizer: SizeSweeper{Runs: 1}, Baselines: plateau.NewBaselines(), Path: path,
		Characterized: map[plateau.ProbeKey]bool{{Target: "t", Probe: "s"}: true},
		OnSwept:       func(r SizeSweepReport) { reports = append(reports, r) },
	})
	if err == nil || !strings.Contains(err.Error(), ErrIncomplete.Error()) || !strings.Contains(err.Error(), "min_free") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a sweep that found nothing wrote the baselines file: %v", err)
	}
	var out strings.Builder
	reports[0].WriteTable(&out)
	if !strings.HasPrefix(out.String(), "\nsize sweep incomplete: t/s: size sweep stopped at file_size=1MiB, run 1 of 1") {
		t.Errorf("report:\n%s", out.String())
	}
}
