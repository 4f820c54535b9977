package characterize

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

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
		// Each doubling of files gains 10%: no size is good.
		res := &probe.Result{Kind: req.Probe.Kind}
		n := int64(1000)
		for f := req.Probe.Files; f > 16; f /= 2 {
			n = n * 11 / 10
		}
		for _, op := range probe.OpsOf(req.Probe.Kind) {
			res.Ops = append(res.Ops, probe.OpResult{Op: op, Operations: n, Seconds: 1})
		}
		return res
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
