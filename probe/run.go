package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"golang.org/x/sys/unix"
)

// Request is everything one probe run needs; the daemon sends it to the
// worker process as JSON on stdin.
type Request struct {
	Target       string      `json:"target"`
	Path         string      `json:"path"`
	CreatePath   bool        `json:"create_path,omitempty"`
	Hostname     string      `json:"hostname"`
	MinFreeRatio float64     `json:"min_free_ratio,omitempty"`
	Probe        ProbeConfig `json:"probe"`
	// Probes names every probe configured on the target, so that files
	// kept for a probe that was removed from the config are swept.
	Probes []string `json:"probes,omitempty"`
}

// NewRequest builds the request for one probe of a target.
func NewRequest(t *Target, p *ProbeConfig, hostname string) Request {
	return Request{
		Target:       t.Name,
		Path:         t.Path,
		CreatePath:   t.CreatePath,
		Hostname:     hostname,
		MinFreeRatio: t.MinFreeRatio,
		Probe:        *p,
		Probes:       t.probeNames(),
	}
}

func (t *Target) probeNames() []string {
	names := make([]string, 0, len(t.Probes))
	for _, p := range t.Probes {
		names = append(names, p.Name)
	}
	return names
}

// Skip reasons, the `reason` label of plateau_probe_skips_total.
const (
	SkipOverlap    = "overlap"
	SkipTargetBusy = "target_busy"
	SkipTargetHung = "target_hung"
	SkipMinFree    = "min_free"
	SkipBudget     = "budget"
)

// SkipReasons lists every skip reason, so counters start at zero.
var SkipReasons = []string{SkipOverlap, SkipTargetBusy, SkipTargetHung, SkipMinFree, SkipBudget}

// selfDeadlineMargin is how much sooner than the daemon's kill the run stops
// itself, so that it can still remove its files and report "timeout".
func selfDeadlineMargin(timeout time.Duration) time.Duration {
	return min(2*time.Second, timeout/5)
}

// Execute runs one probe in this process: it opens and verifies the probe
// directory, takes the target's lock, sweeps leftovers of killed runs, runs
// the probe in a fresh run directory and removes that directory whatever
// happened. It never returns nil.
func Execute(ctx context.Context, req Request) *Result {
	res := &Result{Target: req.Target, Probe: req.Probe.Name, Kind: req.Probe.Kind, Start: time.Now()}
	defer func() { res.End = time.Now() }()
	spec, ok := kinds[req.Probe.Kind]
	if !ok {
		res.fail(fmt.Errorf("unknown probe kind %q", req.Probe.Kind))
		return res
	}
	if req.Probe.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Probe.Timeout-selfDeadlineMargin(req.Probe.Timeout))
		defer cancel()
	}

	dir, err := openProbeDir(req.Path, req.Hostname, req.CreatePath)
	if err != nil {
		res.fail(err)
		return res
	}
	defer dir.Close()
	unlock, err := dir.lock()
	if errors.Is(err, errBusy) {
		res.Skipped = SkipTargetBusy
		return res
	}
	if err != nil {
		res.fail(err)
		return res
	}
	defer unlock()

	swept, err := dir.sweep()
	res.Swept = swept
	if err != nil {
		res.fail(fmt.Errorf("sweep leftovers in %s: %w", dir.path, err))
		return res
	}
	if req.Probes != nil {
		if err := dir.sweepKeepDirs(req.Probes); err != nil {
			res.fail(fmt.Errorf("sweep files of removed probes in %s: %w", dir.path, err))
			return res
		}
	}
	if req.MinFreeRatio > 0 {
		free, err := freeRatio(dir.fd)
		if err != nil {
			res.fail(err)
			return res
		}
		if free < req.MinFreeRatio {
			res.Skipped = SkipMinFree
			res.Error = fmt.Sprintf("%.1f%% free is below min_free_ratio %.1f%%", 100*free, 100*req.MinFreeRatio)
			return res
		}
	}

	run, err := dir.newRunDir(req.Probe.Name)
	if err != nil {
		res.fail(err)
		return res
	}
	rc := &runContext{cfg: &req.Probe, probeDir: dir, dir: run, result: res, nonce: rand.Uint64()}
	runErr := spec.run(ctx, rc)
	if runErr != nil && ctx.Err() != nil {
		runErr = fmt.Errorf("%w (%v)", context.DeadlineExceeded, runErr)
	}
	// Clean up whatever happened: a full or read-only file system must not
	// keep our files. Removal errors matter only if the run itself worked.
	rmErr := run.remove()
	switch {
	case runErr != nil:
		res.fail(fmt.Errorf("probe %s/%s: %w", req.Target, req.Probe.Name, runErr))
	case rmErr != nil:
		res.fail(fmt.Errorf("probe %s/%s: clean up: %w", req.Target, req.Probe.Name, rmErr))
	}
	return res
}

func (r *Result) fail(err error) {
	r.Reason = ReasonOf(err)
	r.Error = err.Error()
	r.Ops = nil
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
