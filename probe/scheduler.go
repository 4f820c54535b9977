package probe

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// SlotOffset spreads a fleet: each (host, target, probe) gets a fixed offset
// within the interval, as Prometheus offsets its scrapes, so thousands of
// nodes do not probe a shared file system at the same instant and a restart
// keeps a node's slot.
func SlotOffset(hostname, target, probe string, interval time.Duration) time.Duration {
	h := fnv.New64a()
	for _, s := range []string{hostname, target, probe} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return time.Duration(h.Sum64() % uint64(interval))
}

// NextSlot is the first instant at or after now where
// (unix time - offset) mod interval == 0.
func NextSlot(now time.Time, offset, interval time.Duration) time.Time {
	// Unix time always exceeds the offset (less than one interval), so the
	// division below rounds up a positive number.
	n := now.UnixNano() - int64(offset)
	iv := int64(interval)
	k := (n + iv - 1) / iv
	return time.Unix(0, k*iv+int64(offset))
}

// Scheduler runs the configured probes in their slots. It holds one loop
// per probe; a reload replaces the loops while the guards (one probe at a
// time per target, stuck workers, I/O budgets) carry over.
type Scheduler struct {
	logger   log.Logger
	hostname string
	runner   Runner
	store    *Store
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

// targetGuard serializes the probes of one target and tracks its budget.
type targetGuard struct {
	sem    chan struct{}
	budget *budget
}

// NewScheduler returns a scheduler that runs probes through runner and
// records into store.
func NewScheduler(logger log.Logger, hostname string, runner Runner, store *Store) *Scheduler {
	ctx, cancel := context.WithCancel(context.Background())
	return &Scheduler{
		logger: logger, hostname: hostname, runner: runner, store: store, now: time.Now,
		guards: map[string]*targetGuard{}, runCtx: ctx, runCancel: cancel,
	}
}

// Apply starts scheduling cfg, replacing the previous config's loops;
// baselines may be nil.
func (s *Scheduler) Apply(cfg *Config, baselines *Baselines) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.store.Configure(cfg, baselines)
	ctx, cancel := context.WithCancel(s.runCtx)
	s.cancel = cancel
	for _, t := range cfg.Targets {
		g := s.guards[t.Name]
		if g == nil {
			g = &targetGuard{sem: make(chan struct{}, 1), budget: &budget{}}
			s.guards[t.Name] = g
		}
		g.budget.setLimit(t.MaxBytesPerHour)
		for _, p := range t.Probes {
			offset := time.Duration(0)
			if p.Splay {
				offset = SlotOffset(s.hostname, t.Name, p.Name, p.Interval)
			}
			level.Info(s.logger).Log("msg", "scheduling probe", "target", t.Name, "probe", p.Name, "kind", p.Kind,
				"interval", p.Interval, "offset", offset, "next", NextSlot(s.now(), offset, p.Interval).Format(time.RFC3339))
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

func (s *Scheduler) loop(ctx context.Context, t *Target, p *ProbeConfig, offset time.Duration, g *targetGuard) {
	defer s.loops.Done()
	logger := log.With(s.logger, "target", t.Name, "probe", p.Name)
	next := NextSlot(s.now(), offset, p.Interval)
	for {
		timer := time.NewTimer(next.Sub(s.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		s.runSlot(ctx, logger, t, p, g, next)
		// Slots that passed while this run went on are skipped, and counted.
		after := NextSlot(s.now(), offset, p.Interval)
		for missed := next.Add(p.Interval); missed.Before(after); missed = missed.Add(p.Interval) {
			s.store.RecordSkip(t.Name, p.Name, SkipOverlap)
		}
		if !after.After(next) {
			after = next.Add(p.Interval)
		}
		next = after
	}
}

func (s *Scheduler) runSlot(ctx context.Context, logger log.Logger, t *Target, p *ProbeConfig, g *targetGuard, slot time.Time) {
	if s.store.Hung(t.Name) {
		level.Warn(logger).Log("msg", "skipping probe: a worker of this target is stuck on the file system")
		s.store.RecordSkip(t.Name, p.Name, SkipTargetHung)
		return
	}
	// Wait for the target's other probe to finish, but not past half the
	// interval: a backlog would only pile runs onto a slow file system.
	wait := time.NewTimer(p.Interval / 2)
	defer wait.Stop()
	select {
	case g.sem <- struct{}{}:
	case <-wait.C:
		s.store.RecordSkip(t.Name, p.Name, SkipTargetBusy)
		return
	case <-ctx.Done():
		return
	}
	defer func() { <-g.sem }()
	need := BytesPerRun(p)
	if !g.budget.allows(s.now(), need) {
		level.Warn(logger).Log("msg", "skipping probe: max_bytes_per_hour would be exceeded", "bytes_per_run", need)
		s.store.RecordSkip(t.Name, p.Name, SkipBudget)
		return
	}

	s.store.SetInProgress(t.Name, p.Name, true)
	out := s.runner.Run(s.runCtx, NewRequest(t, p, s.hostname))
	s.store.SetInProgress(t.Name, p.Name, false)
	moved := int64(0)
	for _, op := range out.Result.Ops {
		moved += op.Bytes
	}
	g.budget.spend(s.now(), moved)
	r := out.Result
	// Log before the store shows the result, so whoever sees a failure
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
		if prev := s.store.LastSuccess(t.Name, p.Name); prev != nil && (prev.Direct != r.Direct || prev.Engine != r.Engine) {
			level.Warn(logger).Log("msg", "probe I/O mode changed", "direct", r.Direct, "engine", r.Engine, "was_direct", prev.Direct, "was_engine", prev.Engine)
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
	s.store.Record(out)
	if out.Stuck != nil {
		s.store.Abandon(t.Name, out.Stuck)
	}
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }

// budget is a sliding one-hour window of bytes moved by a target's probes.
type budget struct {
	mu     sync.Mutex
	limit  int64
	spends []spend
}

type spend struct {
	at    time.Time
	bytes int64
}

func (b *budget) setLimit(limit int64) {
	b.mu.Lock()
	b.limit = limit
	b.mu.Unlock()
}

func (b *budget) allows(now time.Time, need int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit <= 0 {
		return true
	}
	return b.usedLocked(now)+need <= b.limit
}

func (b *budget) spend(now time.Time, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spends = append(b.spends, spend{now, bytes})
}

func (b *budget) usedLocked(now time.Time) int64 {
	cut := 0
	for cut < len(b.spends) && now.Sub(b.spends[cut].at) >= time.Hour {
		cut++
	}
	b.spends = b.spends[cut:]
	var used int64
	for _, s := range b.spends {
		used += s.bytes
	}
	return used
}
