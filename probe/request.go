package probe

import (
	"slices"
	"time"
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

// SelfDeadlineMargin is how much sooner than the daemon's kill a run stops
// itself, so that it can still remove its files and report "timeout". The
// config checks that a random probe's phases end before it.
func SelfDeadlineMargin(timeout time.Duration) time.Duration {
	return min(2*time.Second, timeout/5)
}

// Skip reasons, the `reason` label of plateau_probe_skips_total.
const (
	SkipOverlap    = "overlap"
	SkipTargetBusy = "target_busy"
	SkipTargetHung = "target_hung"
	SkipMinFree    = "min_free"
	SkipBudget     = "budget"
	// SkipJobRunning is a slot at which a Slurm job held the node and the
	// target's when_job_running is skip.
	SkipJobRunning = "job_running"
)

var skipReasons = []string{SkipOverlap, SkipTargetBusy, SkipTargetHung, SkipMinFree, SkipBudget, SkipJobRunning}

// SkipReasons lists every skip reason, so counters start at zero.
func SkipReasons() []string { return slices.Clone(skipReasons) }
