package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// The two ends of a fleet characterization's I/O (characterize --slurm):
// SlurmSession is the coordinator's, which owns the step directories, and
// RunSlurmTask is what each Slurm task runs. Both keep the daemon's rules:
// everything lives in the coordinator's <path>/<hostname>/ (0700, ours, no
// symlink), every name is opened relative to a descriptor with O_NOFOLLOW,
// and only generated names are removed.

// SlurmSession holds the coordinator's probe directory and its lock for a
// whole fleet characterization, so the daemon on the coordinator's node
// neither probes into the steps nor sweeps their directories away between
// a write phase and its read phase. Each step gets a run directory of its
// own, which the tasks of every node write into over the shared file
// system.
type SlurmSession struct {
	dir          *probeDir
	unlock       func()
	minFreeRatio float64
}

// OpenSlurmSession opens and verifies <path>/<hostname>/ as a probe run
// does, takes its lock (an error when the daemon or another
// characterization holds it) and sweeps the run directories of killed
// runs, earlier characterizations included.
func OpenSlurmSession(t *probe.Target, hostname string) (*SlurmSession, error) {
	dir, err := openProbeDir(t.Path, hostname, t.CreatePath)
	if err != nil {
		return nil, err
	}
	unlock, err := dir.lock()
	if err != nil {
		dir.Close()
		if errors.Is(err, errBusy) {
			return nil, fmt.Errorf("%s: %w (stop the daemon's probes of this target on this node, or wait)", dir.path, err)
		}
		return nil, err
	}
	if _, err := dir.sweep(); err != nil {
		unlock()
		dir.Close()
		return nil, fmt.Errorf("sweep leftovers in %s: %w", dir.path, err)
	}
	return &SlurmSession{dir: dir, unlock: unlock, minFreeRatio: t.MinFreeRatio}, nil
}

// Path is the probe directory, <path>/<hostname>.
func (s *SlurmSession) Path() string { return s.dir.path }

// NewStep creates the run directory of one step of a probe and returns its
// name. A shared_file step's file is created in it, untimed, so that every
// task opens the same file. A file system below the target's
// min_free_ratio gets no new step.
func (s *SlurmSession) NewStep(p *probe.ProbeConfig) (string, error) {
	if s.minFreeRatio > 0 {
		free, err := freeRatio(s.dir.fd)
		if err != nil {
			return "", err
		}
		if free < s.minFreeRatio {
			return "", fmt.Errorf("%s: %.1f%% free is below min_free_ratio %.1f%%", s.dir.path, 100*free, 100*s.minFreeRatio)
		}
	}
	rd, err := s.dir.newRunDir(p.Name)
	if err != nil {
		return "", err
	}
	defer unix.Close(rd.fd)
	if p.Kind == probe.KindSharedFile {
		if err := createFiles(rd.fd, rd.path(), sharedFileName); err != nil {
			_ = removeGeneratedTree(s.dir.fd, rd.name)
			return "", err
		}
	}
	return rd.name, nil
}

// RemoveStep removes a step's run directory and the generated names in it.
func (s *SlurmSession) RemoveStep(name string) error {
	if !runDirName.MatchString(name) {
		return fmt.Errorf("%w: %q is not a run directory name", probe.ErrUnsafe, name)
	}
	return removeGeneratedTree(s.dir.fd, name)
}

// Close removes whatever step directories are left (a failed step's) and
// releases the lock.
func (s *SlurmSession) Close() error {
	_, err := s.dir.sweep()
	s.unlock()
	return errors.Join(err, s.dir.Close())
}

// progressSamples is about how many progress samples a task reports per
// op: enough to interpolate the stonewalled amount within 2%, few enough
// that 1024 tasks' lines stay small.
const progressSamples = 64

// RunSlurmTask runs task's share of one phase of a fleet step and reports
// it; it never returns nil. The task prepares its file (untimed), waits
// for the request's start barrier and then does its timed I/O as one
// worker of the kind's engine code.
func RunSlurmTask(ctx context.Context, req probe.SlurmTaskRequest, task int, node string) *probe.SlurmTaskResult {
	res := &probe.SlurmTaskResult{Task: task, Node: node, Phase: req.Phase}
	if err := runSlurmTask(ctx, req, res); err != nil {
		res.Error = err.Error()
	}
	return res
}

func runSlurmTask(ctx context.Context, req probe.SlurmTaskRequest, res *probe.SlurmTaskResult) error {
	if req.Probe.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Probe.Timeout)
		defer cancel()
	}
	if req.Phase == probe.SlurmPhaseProbe {
		if req.Request == nil {
			return fmt.Errorf("probe phase without a request")
		}
		r := *req.Request
		if r.Hostname == "" {
			h, err := os.Hostname()
			if err != nil {
				return err
			}
			r.Hostname = h
		}
		res.Arrived = time.Now()
		res.Result = Execute(ctx, r)
		return nil
	}
	if req.Tasks < 1 || res.Task < 0 || res.Task >= req.Tasks {
		return fmt.Errorf("task %d of %d tasks", res.Task, req.Tasks)
	}
	dir, err := openProbeDir(req.Path, req.Host, false)
	if err != nil {
		return err
	}
	defer dir.Close()
	rd, err := openStepDir(dir, req.Run)
	if err != nil {
		return err
	}
	defer unix.Close(rd.fd)
	p := req.Probe
	switch {
	case req.Phase == probe.SlurmPhaseMetadata && p.Kind == probe.KindMetadata:
		return slurmMetadata(ctx, req, rd, dir, res)
	case (req.Phase == probe.SlurmPhaseWrite || req.Phase == probe.SlurmPhaseRead) &&
		(p.Kind == probe.KindSequential || p.Kind == probe.KindSharedFile):
		return slurmTransfer(ctx, req, rd, res)
	}
	return fmt.Errorf("phase %q of kind %q is not a fleet step", req.Phase, p.Kind)
}

// openStepDir opens the step's run directory in the probe directory,
// refusing anything but a run directory of ours.
func openStepDir(dir *probeDir, name string) (*runDir, error) {
	if !runDirName.MatchString(name) {
		return nil, fmt.Errorf("%w: %q is not a run directory name", probe.ErrUnsafe, name)
	}
	fd, err := unix.Openat(dir.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open step directory %s/%s: %w", dir.path, name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s/%s is not owned by uid %d", probe.ErrUnsafe, dir.path, name, os.Geteuid())
	}
	return &runDir{parent: dir, fd: fd, name: name}, nil
}

// waitStart sleeps until the barrier and records when the task got there.
func waitStart(ctx context.Context, req probe.SlurmTaskRequest, res *probe.SlurmTaskResult) error {
	res.Arrived = time.Now()
	if d := time.Until(req.StartAt); d > 0 {
		return probe.Sleep(ctx, d)
	}
	return nil
}

// slurmTransfer is one task's write or read of a sequential step (its own
// file w<task>.dat, as IOzone's N-to-N) or a shared_file step (segment
// <task> of shared.dat, as IOR's N-to-1). A read takes the file or
// segment of task (task + Shift) mod Tasks, written on another node.
func slurmTransfer(ctx context.Context, req probe.SlurmTaskRequest, rd *runDir, res *probe.SlurmTaskResult) error {
	p := req.Probe
	write := req.Phase == probe.SlurmPhaseWrite
	who := res.Task
	if !write {
		who = ((res.Task+req.Shift)%req.Tasks + req.Tasks) % req.Tasks
	}
	sp := span{dirfd: rd.fd, write: write, blockSize: p.BlockSize, nonce: req.Nonce, id: uint32(who)}
	switch p.Kind {
	case probe.KindSequential:
		sp.name, sp.length = workerFileName(who), p.FileSize
		if write {
			if err := createFiles(rd.fd, rd.path(), sp.name); err != nil {
				return err
			}
		}
	case probe.KindSharedFile:
		sp.name, sp.off, sp.length = sharedFileName, int64(who)*p.SegmentSize, p.SegmentSize
	}
	if p.BlockSize <= 0 || sp.length <= 0 {
		return fmt.Errorf("block size %d and length %d must be positive", p.BlockSize, sp.length)
	}
	mode, err := chooseIOMode(rd.fd, sp.name, p.BlockSize)
	if err != nil {
		return err
	}
	res.Direct, res.Engine = mode.direct, probe.EngineSync
	sp.mode = mode
	sp.buf = workerBuffers(1, p.BlockSize, mode.align, req.Nonce+uint64(who))[0]
	op := probe.SlurmTaskOp{Op: req.Phase, Progress: make([]probe.SlurmProgress, 0, progressSamples+2)}
	every := max(sp.length/progressSamples, 1)
	next := every
	sp.progress = func(done int64) {
		if done >= next {
			op.Progress = append(op.Progress, probe.SlurmProgress{S: time.Since(op.Start).Seconds(), Done: done})
			next = (done/every + 1) * every
		}
	}
	if err := waitStart(ctx, req, res); err != nil {
		return err
	}
	op.Start = time.Now()
	err = transfer(ctx, sp, newLatencyRecorder())
	op.End = time.Now()
	if err != nil {
		return err
	}
	op.Done = sp.length
	// The last sample is the end, after fsync and close.
	op.Progress = append(op.Progress, probe.SlurmProgress{S: op.End.Sub(op.Start).Seconds(), Done: sp.length})
	res.Ops = append(res.Ops, op)
	return nil
}

// slurmMetadata is one task's mdtest share of one op: its own directory
// d<task> in the step directory with the probe's files, created, stated,
// read or removed (one op per srun, in that order) by the metadata kind's
// code as worker <task>.
func slurmMetadata(ctx context.Context, req probe.SlurmTaskRequest, rd *runDir, dir *probeDir, res *probe.SlurmTaskResult) error {
	cfg := req.Probe
	cfg.Workers = 1
	if !containsOp(probe.OpsOf(probe.KindMetadata), req.Op) {
		return fmt.Errorf("metadata phase of op %q", req.Op)
	}
	rc := &runContext{cfg: &cfg, probeDir: dir, dir: rd, result: &probe.Result{}, nonce: req.Nonce, firstWorker: res.Task, onlyOp: req.Op}
	res.Engine = probe.EngineSync
	if err := waitStart(ctx, req, res); err != nil {
		return err
	}
	if err := runMetadata(ctx, rc); err != nil {
		return err
	}
	if len(rc.spans) != len(rc.result.Ops) {
		return fmt.Errorf("metadata recorded %d ops and %d spans", len(rc.result.Ops), len(rc.spans))
	}
	for i, o := range rc.result.Ops {
		res.Ops = append(res.Ops, probe.SlurmTaskOp{Op: o.Op, Done: o.Operations, Start: rc.spans[i][0], End: rc.spans[i][1]})
	}
	return nil
}

func containsOp(ops []string, op string) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}
