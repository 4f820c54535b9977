// Package engine is what runs inside a probe-worker process: Execute, the
// probe directory's safety rules, the choice of direct I/O, transfers, AIO,
// cold reads, each kind's run function and the latency recorder. Its code
// is what can hang in D state on a dead mount, so it imports no other
// sub-package of probe and no Prometheus or HTTP code: nothing here can
// touch the scrape path.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// runContext is handed to a kind's run function.
type runContext struct {
	cfg *probe.ProbeConfig
	// probeDir is the target's verified probe directory; kinds that keep
	// files across runs open their keep directory in it.
	probeDir *probeDir
	// dir is this run's scratch directory, removed when the run ends.
	dir    *runDir
	result *probe.Result
	// nonce makes this run's data differ from every other run's.
	nonce uint64
	// firstWorker is the number of the run's first worker: 0, except for
	// a Slurm task, which is worker SLURM_PROCID of the step.
	firstWorker int
	// onlyOp, when set, runs that one phase of the metadata kind: a
	// Slurm step runs each in its own srun, as mdtest separates its phases
	// with barriers.
	onlyOp string
	// spans are the start and end of each op the metadata kind recorded,
	// in order, for a Slurm task's report.
	spans [][2]time.Time
}

// addOp records one measured phase.
func (rc *runContext) addOp(op string, bytes, operations int64, seconds float64, lat *latencyRecorder) {
	o := probe.OpResult{Op: op, Bytes: bytes, Operations: operations, Seconds: seconds}
	if lat != nil {
		o.Latency = lat.Snapshot()
	}
	rc.result.Ops = append(rc.result.Ops, o)
}

// runners are the kinds' run functions; their schema is probe's.
var runners = map[string]func(ctx context.Context, rc *runContext) error{
	probe.KindSequential: runSequential,
	probe.KindSharedFile: runSharedFile,
	probe.KindMetadata:   runMetadata,
	probe.KindRandom:     runRandom,
}

// Execute runs one probe in this process: it opens and verifies the probe
// directory, takes the target's lock, sweeps leftovers of killed runs, runs
// the probe in a fresh run directory and removes that directory whatever
// happened. It never returns nil.
func Execute(ctx context.Context, req probe.Request) *probe.Result {
	res := &probe.Result{Target: req.Target, Probe: req.Probe.Name, Kind: req.Probe.Kind, Start: time.Now()}
	defer func() { res.End = time.Now() }()
	run, ok := runners[req.Probe.Kind]
	if !ok {
		res.Fail(fmt.Errorf("unknown probe kind %q", req.Probe.Kind))
		return res
	}
	if req.Probe.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Probe.Timeout-probe.SelfDeadlineMargin(req.Probe.Timeout))
		defer cancel()
	}

	dir, err := openProbeDir(req.Path, req.Hostname, req.CreatePath)
	if err != nil {
		res.Fail(err)
		return res
	}
	defer dir.Close()
	unlock, err := dir.lock()
	if errors.Is(err, errBusy) {
		res.Skipped = probe.SkipTargetBusy
		return res
	}
	if err != nil {
		res.Fail(err)
		return res
	}
	defer unlock()

	swept, err := dir.sweep()
	res.Swept = swept
	if err != nil {
		res.Fail(fmt.Errorf("sweep leftovers in %s: %w", dir.path, err))
		return res
	}
	if req.Probes != nil {
		if err := dir.sweepKeepDirs(req.Probes); err != nil {
			res.Fail(fmt.Errorf("sweep files of removed probes in %s: %w", dir.path, err))
			return res
		}
	}
	// min_free_ratio keeps data probes off a fuller file system (CONFIGURATION.md:
	// "skip data probes ... while the file system's free space is under this share"); a probe that writes no
	// data (a metadata probe of empty files) runs on, so a full file
	// system still has its metadata measured.
	if skip, err := checkFree(dir, req); err != nil {
		res.Fail(err)
		return res
	} else if skip != "" {
		res.Skipped = probe.SkipMinFree
		res.Error = skip
		return res
	}

	runDir, err := dir.newRunDir(req.Probe.Name)
	if err != nil {
		res.Fail(err)
		return res
	}
	rc := &runContext{cfg: &req.Probe, probeDir: dir, dir: runDir, result: res, nonce: rand.Uint64()}
	runErr := run(ctx, rc)
	if runErr != nil && ctx.Err() != nil {
		runErr = fmt.Errorf("%w (%v)", context.DeadlineExceeded, runErr)
	}
	// Clean up whatever happened: a full or read-only file system must not
	// keep our files. Removal errors matter only if the run itself worked.
	rmErr := runDir.remove()
	switch {
	case runErr != nil:
		res.Fail(fmt.Errorf("probe %s/%s: %w", req.Target, req.Probe.Name, runErr))
	case rmErr != nil:
		res.Fail(fmt.Errorf("probe %s/%s: clean up: %w", req.Target, req.Probe.Name, rmErr))
	}
	return res
}

// freeRatio is the fraction of blocks available to unprivileged users.
func freeRatio(fd int) (float64, error) {
	var s unix.Statfs_t
	if err := unix.Fstatfs(fd, &s); err != nil {
		return 0, fmt.Errorf("statfs: %w", err)
	}
	if s.Blocks == 0 {
		return 1, nil
	}
	return float64(s.Bavail) / float64(s.Blocks), nil
}
