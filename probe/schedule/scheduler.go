// Package schedule decides when probes run: each probe in its own slot of
// its interval (spread over a fleet by a hash of host, target and probe),
// one probe at a time per target, within the target's I/O budget, and
// never on a target whose worker is stuck on the file system. It runs
// probes through a worker.Runner and tells a Reporter what happened; it
// reads nothing back from what it reported. At each slot it asks a
// JobWatcher whether a Slurm job holds the node, and skips the probes of
// targets whose when_job_running is skip while one does.
package schedule

import (
	"context"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/iocount"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

// Reporter is told about every run, skip and stuck worker; the daemon's
// metric store is one.
type Reporter interface {
	// SetInProgress marks a probe as running or not.
	SetInProgress(target, probe string, running bool)
	// RecordSkip counts a run that did not happen, by skip reason.
	RecordSkip(target, probe, reason string)
	// Record is the result of a run; timedOut is set when its worker was
	// killed at the timeout.
	Record(r *probe.Result, timedOut bool)
	// SetAbandoned is how many killed workers of the target have not
	// exited yet; no probe starts on the target while any have not.
	SetAbandoned(target string, workers int)
}

// ConcurrentReporter is a Reporter that is also told, just before Record of
// a successful run, the node's own I/O on the target's file system during
// that run (ok false when no counters applied).
type ConcurrentReporter interface {
	RecordConcurrent(target, probe string, rate iocount.Rate, ok bool)
}

// JobWatcher tells whether a job holds the node now. The scheduler asks it
// once per slot of each probe that would skip beside a job, so it must be
// cheap (nodejobs reads a few directories) and must not block on a file
// system under test.
type JobWatcher interface {
	// JobRunning reports whether a job holds the node, and what saw it
	// (for the log).
	JobRunning() (running bool, detail string)
}

// Options are what a Scheduler needs.
type Options struct {
	Logger   log.Logger
	Hostname string
	Runner   worker.Runner
	Reporter Reporter
	// IOCounters samples the node's byte counters of a target's file
	// system before and after each run; nil samples none.
	IOCounters iocount.Counters
	// Jobs is asked at each slot whether a job holds the node; nil sees
	// none, as on a node without Slurm.
	Jobs JobWatcher
}

// Scheduler runs the configured probes in their slots. It holds one loop
// per probe; a reload replaces the loops while the guards (one probe at a
// time per target, stuck workers, I/O budgets) carry over.
type Scheduler struct {
	logger   log.Logger
	hostname string
	runner   worker.Runner
	reporter Reporter
	counters iocount.Counters
	jobs     JobWatcher
	now      func() time.Time

	mu      sync.Mutex
	cancel  context.CancelFunc
	loops   sync.WaitGroup
	guards  map[string]*targetGuard
	stopped bool
	// runCtx is cancelled only by Stop, so a reload lets running probes end.
	runCtx    context.Context
	runCancel context.CancelFunc
}

// targetGuard serializes the probes of one target, tracks its budget, and
// counts its workers that did not exit when killed. It outlives reloads.
type targetGuard struct {
	name   string
	sem    chan struct{}
	budget *budget

	mu        sync.Mutex
	abandoned int
	// modes is how each probe's last successful run did its I/O.
	modes map[string]ioMode
}

// ioMode is how a run did its I/O, as plateau_probe_info labels it.
type ioMode struct {
	direct bool
	engine string
}

// New returns a scheduler; Apply gives it probes to run.
func New(o Options) *Scheduler {
	ctx, cancel := context.WithCancel(context.Background())
	return &Scheduler{
		logger: o.Logger, hostname: o.Hostname, runner: o.Runner, reporter: o.Reporter, counters: o.IOCounters, jobs: o.Jobs, now: time.Now,
		guards: map[string]*targetGuard{}, runCtx: ctx, runCancel: cancel,
	}
}

// hung reports whether a killed worker of the target has not exited.
func (g *targetGuard) hung() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.abandoned > 0
}

// abandon counts a worker that survived SIGKILL until stuck is closed. The
// count is reported under the guard's lock, so reports cannot overtake
// each other.
func (g *targetGuard) abandon(r Reporter, stuck <-chan struct{}) {
	g.mu.Lock()
	g.abandoned++
	r.SetAbandoned(g.name, g.abandoned)
	g.mu.Unlock()
	go func() {
		<-stuck
		g.mu.Lock()
		g.abandoned--
		r.SetAbandoned(g.name, g.abandoned)
		g.mu.Unlock()
	}()
}

// modeChanged records how a successful run did its I/O and returns the
// previous mode when it differs.
func (g *targetGuard) modeChanged(probeName string, r *probe.Result) (ioMode, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := ioMode{r.Direct, r.Engine}
	prev, ok := g.modes[probeName]
	g.modes[probeName] = now
	return prev, ok && prev != now
}

// Apply starts scheduling cfg, replacing the previous config's loops.
func (s *Scheduler) Apply(cfg *probe.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	s.cancel = cancel
	for _, t := range cfg.Targets {
		g := s.guards[t.Name]
		if g == nil {
			g = &targetGuard{name: t.Name, sem: make(chan struct{}, 1), budget: &budget{}, modes: map[string]ioMode{}}
			s.guards[t.Name] = g
		}
		g.budget.setLimit(t.MaxBytesPerHour)
		for _, p := range t.Probes {
			offset := ProbeOffset(s.hostname, t.Name, p)
			kv := []any{"msg", "scheduling probe", "target", t.Name, "probe", p.Name, "kind", p.Kind,
				"interval", p.Interval, "offset", offset, "next", NextSlot(s.now(), offset, p.Interval).Format(time.RFC3339)}
			if p.Interval != p.BaseInterval() {
				kv = append(kv, "configured_interval", p.BaseInterval())
			}
			level.Info(s.logger).Log(kv...)
			s.loops.Add(1)
			go s.loop(ctx, t, p, offset, g)
		}
	}
}

// Stop ends every loop and kills running workers.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	s.stopped = true
	if s.cancel != nil {
		s.cancel()
	}
	s.runCancel()
	s.mu.Unlock()
	s.loops.Wait()
}

func (s *Scheduler) loop(ctx context.Context, t *probe.Target, p *probe.ProbeConfig, offset time.Duration, g *targetGuard) {
	defer s.loops.Done()
	l := &probeLoop{logger: log.With(s.logger, "target", t.Name, "probe", p.Name)}
	next := NextSlot(s.now(), offset, p.Interval)
	for {
		timer := time.NewTimer(next.Sub(s.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		s.runSlot(ctx, l, t, p, g, next)
		// Slots that passed while this run went on are skipped, and counted.
		after := NextSlot(s.now(), offset, p.Interval)
		for missed := next.Add(p.Interval); missed.Before(after); missed = missed.Add(p.Interval) {
			s.reporter.RecordSkip(t.Name, p.Name, probe.SkipOverlap)
		}
		if !after.After(next) {
			after = next.Add(p.Interval)
		}
		next = after
	}
}

// probeLoop is what the loop of one probe keeps from slot to slot.
type probeLoop struct {
	logger log.Logger
	// skippedFor are the jobs the last slot was skipped for, "" when it
	// was not skipped for a job: a job that holds the node for hours is
	// logged when the skips start, when the jobs change and when they end,
	// and each slot between counts in plateau_probe_skips_total (and logs
	// at debug). A log line at every slot cost about a fifth of the idle
	// daemon's CPU on a node running jobs (bench/noise.sh).
	skippedFor string
}

func (s *Scheduler) runSlot(ctx context.Context, l *probeLoop, t *probe.Target, p *probe.ProbeConfig, g *targetGuard, slot time.Time) {
	logger := l.logger
	if g.hung() {
		level.Warn(logger).Log("msg", "skipping probe: a worker of this target is stuck on the file system")
		s.reporter.RecordSkip(t.Name, p.Name, probe.SkipTargetHung)
		return
	}
	// Wait for the target's other probe to finish, but not past half the
	// interval: a backlog would only pile runs onto a slow file system.
	wait := time.NewTimer(p.Interval / 2)
	defer wait.Stop()
	select {
	case g.sem <- struct{}{}:
	case <-wait.C:
		s.reporter.RecordSkip(t.Name, p.Name, probe.SkipTargetBusy)
		return
	case <-ctx.Done():
		return
	}
	defer func() { <-g.sem }()
	// Asked after the wait for the target, so that a job that started
	// meanwhile is seen, and before the budget, so that the skip names the
	// reason an operator can act on.
	if running, detail := s.jobRunning(t); running {
		logAt := level.Debug
		if detail != l.skippedFor {
			logAt = level.Info
		}
		logAt(logger).Log("msg", "skipping probe: a Slurm job holds the node", "jobs", detail)
		l.skippedFor = detail
		s.reporter.RecordSkip(t.Name, p.Name, probe.SkipJobRunning)
		return
	}
	if l.skippedFor != "" {
		level.Info(logger).Log("msg", "probing again: no Slurm job holds the node any more", "skipped_for", l.skippedFor)
		l.skippedFor = ""
	}
	need := probe.BytesPerRun(p)
	if !g.budget.allows(s.now(), need) {
		level.Warn(logger).Log("msg", "skipping probe: max_bytes_per_hour would be exceeded", "bytes_per_run", need)
		s.reporter.RecordSkip(t.Name, p.Name, probe.SkipBudget)
		return
	}

	s.reporter.SetInProgress(t.Name, p.Name, true)
	before, sampled := s.sample(t.Path)
	out := s.runner.Run(s.runCtx, probe.NewRequest(t, p, s.hostname))
	after, sampledAfter := s.sample(t.Path)
	s.reporter.SetInProgress(t.Name, p.Name, false)
	moved := int64(0)
	for _, op := range out.Result.Ops {
		moved += op.Bytes
	}
	g.budget.spend(s.now(), moved)
	r := out.Result
	// Log before the result is reported, so whoever sees a failure
	// on /metrics finds its reason in the log.
	switch {
	case r.Skipped != "":
		level.Info(logger).Log("msg", "probe skipped", "reason", r.Skipped, "detail", r.Error)
	case r.Reason != "":
		level.Error(logger).Log("msg", "probe failed", "reason", r.Reason, "err", r.Error, "slot", slot.Format(time.RFC3339))
	default:
		// The worker cannot log, and a run that switched from libaio to
		// goroutines (AIO contexts exhausted) or from O_DIRECT to the page
		// cache measures something else: say so once, when it happens.
		if prev, changed := g.modeChanged(p.Name, r); changed {
			level.Warn(logger).Log("msg", "probe I/O mode changed", "direct", r.Direct, "engine", r.Engine, "was_direct", prev.direct, "was_engine", prev.engine)
		}
		kv := []any{"msg", "probe done", "seconds", r.End.Sub(r.Start).Seconds(), "direct", r.Direct, "engine", r.Engine}
		for _, op := range r.Ops {
			kv = append(kv, op.Op+"_MBps", round1(op.BytesPerSecond()/1e6))
		}
		if r.Swept > 0 {
			kv = append(kv, "swept_leftovers", r.Swept)
		}
		level.Debug(logger).Log(kv...)
	}
	if cr, ok := s.reporter.(ConcurrentReporter); ok && r.OK() && !out.TimedOut {
		pr, pw := probeBytes(r)
		rate, ok := iocount.Rate{}, false
		if sampled && sampledAfter {
			rate, ok = iocount.Concurrent(before, after, pr, pw)
		}
		cr.RecordConcurrent(t.Name, p.Name, rate, ok)
	}
	s.reporter.Record(r, out.TimedOut)
	if out.Stuck != nil {
		g.abandon(s.reporter, out.Stuck)
	}
}

// jobRunning asks the watcher, unless the target runs its probes beside
// jobs anyway (when_job_running: run). Anything but run skips, so that a
// target built without the parser (tests, tools) is as quiet as the
// default.
func (s *Scheduler) jobRunning(t *probe.Target) (bool, string) {
	if s.jobs == nil || t.WhenJobRunning == probe.WhenJobRun {
		return false, ""
	}
	return s.jobs.JobRunning()
}

// sample reads the node's byte counters of the file system under path.
// It reads /proc files (or values in memory) only, never the path itself,
// so it does not block on a hung mount.
func (s *Scheduler) sample(path string) (iocount.Sample, bool) {
	if s.counters == nil {
		return iocount.Sample{}, false
	}
	return s.counters.Sample(path)
}

// probeBytes is what a run read and wrote itself: its read op's bytes are
// reads; those of write, create (metadata files with data) and prealloc
// (the random probe's file) are writes; stat and remove move no data.
func probeBytes(r *probe.Result) (read, write uint64) {
	for _, op := range r.Ops {
		if op.Bytes <= 0 {
			continue
		}
		switch op.Op {
		case "read":
			read += uint64(op.Bytes)
		case "stat", "remove":
		default:
			write += uint64(op.Bytes)
		}
	}
	return read, write
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
