package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// runTasks runs n tasks of one phase in this process, as srun would on
// the nodes, and fails on a task's error.
func runTasks(t *testing.T, req probe.SlurmTaskRequest, n int) []*probe.SlurmTaskResult {
	t.Helper()
	req.Tasks = n
	req.StartAt = time.Now().Add(200 * time.Millisecond)
	out := make([]*probe.SlurmTaskResult, n)
	done := make(chan int)
	for i := 0; i < n; i++ {
		go func(i int) {
			out[i] = RunSlurmTask(context.Background(), req, i, "node"+string(rune('a'+i%2)))
			done <- i
		}(i)
	}
	for range out {
		<-done
	}
	for _, r := range out {
		if r.Error != "" {
			t.Fatalf("%s phase, task %d: %s", req.Phase, r.Task, r.Error)
		}
	}
	return out
}

// A fleet step's tasks share the step directory of the coordinator's
// probe directory: they write their files, read each other's, run the
// metadata ops one phase each, and the session removes all of it.
func TestSlurmTasksShareTheStepDirectory(t *testing.T) {
	root := t.TempDir()
	target := &probe.Target{Name: "t", Path: root}
	s, err := OpenSlurmSession(target, "coord")
	if err != nil {
		t.Fatal(err)
	}
	// The lock is held: a probe run of the daemon on this node is skipped.
	if res := Execute(context.Background(), probe.Request{Target: "t", Path: root, Hostname: "coord", Probe: probe.ProbeConfig{Name: "x", Kind: probe.KindMetadata, Workers: 1, Files: 1}}); res.Skipped != probe.SkipTargetBusy {
		t.Errorf("a probe during the session: %+v, want skipped target_busy", res)
	}
	for _, p := range []*probe.ProbeConfig{
		{Name: "seq", Kind: probe.KindSequential, FileSize: 256 << 10, BlockSize: 64 << 10, Timeout: time.Minute},
		{Name: "shared", Kind: probe.KindSharedFile, SegmentSize: 256 << 10, BlockSize: 64 << 10, Timeout: time.Minute},
	} {
		run, err := s.NewStep(p)
		if err != nil {
			t.Fatal(err)
		}
		req := probe.SlurmTaskRequest{Target: "t", Path: root, Host: "coord", Run: run, Probe: *p, Phase: probe.SlurmPhaseWrite, Nonce: 7}
		for _, r := range runTasks(t, req, 3) {
			o := r.Ops[0]
			if o.Op != "write" || o.Done != 256<<10 || len(o.Progress) == 0 || o.Progress[len(o.Progress)-1].Done != o.Done || o.End.Before(o.Start) {
				t.Errorf("%s write task %d: %+v", p.Name, r.Task, o)
			}
			if o.Start.Before(req.StartAt) || r.Arrived.After(o.Start) {
				t.Errorf("task %d arrived %s, started %s, barrier %s", r.Task, r.Arrived, o.Start, req.StartAt)
			}
		}
		req.Phase, req.Shift = probe.SlurmPhaseRead, 1
		for _, r := range runTasks(t, req, 3) {
			if r.Ops[0].Op != "read" || r.Ops[0].Done != 256<<10 {
				t.Errorf("%s read task %d: %+v", p.Name, r.Task, r.Ops[0])
			}
		}
		if err := s.RemoveStep(run); err != nil {
			t.Fatal(err)
		}
	}
	md := &probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Files: 20, Timeout: time.Minute}
	run, err := s.NewStep(md)
	if err != nil {
		t.Fatal(err)
	}
	req := probe.SlurmTaskRequest{Target: "t", Path: root, Host: "coord", Run: run, Probe: *md, Phase: probe.SlurmPhaseMetadata}
	for _, op := range probe.OpsOf(probe.KindMetadata) {
		req.Op = op
		for _, r := range runTasks(t, req, 2) {
			if len(r.Ops) != 1 || r.Ops[0].Op != op || r.Ops[0].Done != 20 {
				t.Errorf("metadata %s task %d: %+v", op, r.Task, r.Ops)
			}
		}
	}
	// A step directory left behind (a failed step) goes at Close.
	if _, err := s.NewStep(md); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(filepath.Join(root, "coord"))
	for _, e := range left {
		if e.Name() != lockName {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func TestSlurmTaskRefusesWhatIsNotItsStep(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "coord"), 0o700); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "coord", "run.seq.1.2")); err != nil {
		t.Fatal(err)
	}
	p := probe.ProbeConfig{Name: "seq", Kind: probe.KindSequential, FileSize: 64 << 10, BlockSize: 64 << 10}
	for _, run := range []string{"run.seq.1.2", "../../etc", "keep.seq"} {
		r := RunSlurmTask(context.Background(), probe.SlurmTaskRequest{Path: root, Host: "coord", Run: run, Probe: p, Phase: probe.SlurmPhaseWrite, Tasks: 1}, 0, "n")
		if r.Error == "" {
			t.Errorf("run %q: no error", run)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a task wrote through the symlink: %v", entries)
	}
	r := RunSlurmTask(context.Background(), probe.SlurmTaskRequest{Path: root, Host: "coord", Run: "run.seq.1.3", Probe: p, Phase: probe.SlurmPhaseWrite, Tasks: 1}, 1, "n")
	if !strings.Contains(r.Error, "task 1 of 1") {
		t.Errorf("task out of range: %q", r.Error)
	}
	if err := (&SlurmSession{}).RemoveStep("../x"); !errors.Is(err, probe.ErrUnsafe) {
		t.Errorf("RemoveStep of a foreign name: %v", err)
	}
}
