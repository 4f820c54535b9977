package alertstack

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeline records, with times, what the alerting pipeline did: every
// alert's states in Prometheus (pending, firing, gone) and in Alertmanager
// (active, or suppressed and by what), every notification the webhook got,
// and the test's phases. It logs each change as it sees it, and the whole
// story at the end, with every probe run of every daemon when the test
// failed, so that a failure can be read off the log.
type Timeline struct {
	s      *Stack
	mu     sync.Mutex
	events []timelineEvent
	prom   map[string]string // alert -> state in Prometheus
	am     map[string]string // alert -> state in Alertmanager
	hookN  int
	errs   map[string]bool
	// host is how busy the machine was, every few seconds: runs slow
	// for all daemons at once are the machine's doing when other work
	// presses on it, and a failure's timeline should show it.
	host      []timelineEvent
	lastSteal uint64
}

type timelineEvent struct {
	at   time.Time
	what string
}

// WatchAlerts starts a timeline, polling every waitPoll until cleanup.
func (s *Stack) WatchAlerts(t *testing.T) *Timeline {
	tl := &Timeline{s: s, prom: map[string]string{}, am: map[string]string{}, errs: map[string]bool{}}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(waitPoll)
		defer tick.Stop()
		for i := 0; ; i++ {
			tl.observe(t)
			if i%10 == 0 {
				tl.sampleHost()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-stopped
		tl.observe(t)
		tl.summary(t)
	})
	return tl
}

// AlertKey names an alert for the timeline: its name, severity, node (the
// daemon's host name rather than its address) and op.
func (s *Stack) AlertKey(l map[string]string) string {
	k := l["alertname"] + "{" + l["severity"] + "}"
	if in := l["instance"]; in != "" {
		k += " " + s.HostOf(in)
	} else if tg := l["target"]; tg != "" {
		k += " target=" + tg
	}
	if op := l["op"]; op != "" {
		k += " op=" + op
	}
	return k
}

// Mark records a step of the test.
func (tl *Timeline) Mark(t *testing.T, format string, args ...any) time.Time {
	t.Helper()
	now := time.Now()
	what := fmt.Sprintf(format, args...)
	tl.Add(t, now, "TEST: "+what)
	return now
}

func (tl *Timeline) Add(t *testing.T, at time.Time, what string) {
	tl.mu.Lock()
	tl.events = append(tl.events, timelineEvent{at, what})
	tl.mu.Unlock()
	t.Logf("%s: %s", tl.s.Since(at), what)
}

func (tl *Timeline) fail(t *testing.T, what string, err error) {
	if msg := what + ": " + err.Error(); !tl.errs[msg] {
		tl.errs[msg] = true
		tl.Add(t, time.Now(), msg)
	}
}

func (tl *Timeline) observe(t *testing.T) {
	now := time.Now()
	if alerts, err := tl.s.Prom.Alerts(); err != nil {
		tl.fail(t, "Prometheus alerts", err)
	} else {
		seen := map[string]string{}
		for _, a := range alerts {
			k := tl.s.AlertKey(a.Labels)
			seen[k] = a.State
			if tl.prom[k] != a.State {
				tl.Add(t, now, fmt.Sprintf("Prometheus: %s %s (value %s)", k, a.State, a.Value))
			}
		}
		for k := range tl.prom {
			if _, ok := seen[k]; !ok {
				tl.Add(t, now, fmt.Sprintf("Prometheus: %s gone (resolved)", k))
			}
		}
		tl.prom = seen
	}
	if alerts, err := tl.s.AmAlerts(""); err != nil {
		tl.fail(t, "Alertmanager alerts", err)
	} else {
		byFP := map[string]string{}
		for _, a := range alerts {
			byFP[a.Fingerprint] = tl.s.AlertKey(a.Labels)
		}
		seen := map[string]string{}
		for _, a := range alerts {
			k, st := tl.s.AlertKey(a.Labels), a.Status.State
			for _, fp := range a.Status.InhibitedBy {
				st += ", inhibited by " + OrElse(byFP[fp], fp)
			}
			seen[k] = st
			if tl.am[k] != st {
				tl.Add(t, now, fmt.Sprintf("Alertmanager: %s %s", k, st))
			}
		}
		for k := range tl.am {
			if _, ok := seen[k]; !ok {
				tl.Add(t, now, fmt.Sprintf("Alertmanager: %s gone", k))
			}
		}
		tl.am = seen
	}
	got := tl.s.Hook.Received()
	for _, a := range got[tl.hookN:] {
		tl.Add(t, a.At, fmt.Sprintf("webhook: %s %s", a.Status, tl.s.AlertKey(a.Labels)))
	}
	tl.hookN = len(got)
}

// sampleHost records the load average, the pressure stall information
// of CPU, I/O and memory (the share of the last 10s in which some task
// waited; throttled probes count in io) and the CPU time the hypervisor
// stole since the last sample.
func (tl *Timeline) sampleHost() {
	var b strings.Builder
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "load %s", strings.Fields(string(data))[0])
	}
	for _, res := range []string{"cpu", "io", "memory"} {
		data, err := os.ReadFile("/proc/pressure/" + res)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(strings.SplitN(string(data), "\n", 2)[0]) {
			if v, ok := strings.CutPrefix(f, "avg10="); ok {
				fmt.Fprintf(&b, ", %s pressure %s%%", res, v)
			}
		}
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		// "cpu user nice system idle iowait irq softirq steal ..." (proc(5))
		if f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0]); len(f) > 8 {
			if steal, err := strconv.ParseUint(f[8], 10, 64); err == nil {
				if tl.lastSteal > 0 {
					fmt.Fprintf(&b, ", steal %d ticks", steal-tl.lastSteal)
				}
				tl.lastSteal = steal
			}
		}
	}
	tl.mu.Lock()
	tl.host = append(tl.host, timelineEvent{time.Now(), "host: " + b.String()})
	tl.mu.Unlock()
}

// OrElse returns the first of its arguments that is not empty.
func OrElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (tl *Timeline) summary(t *testing.T) {
	tl.mu.Lock()
	events := slices.Clone(tl.events)
	tl.mu.Unlock()
	if t.Failed() {
		events = append(events, tl.host...)
		for _, d := range tl.s.Daemons {
			runs, _ := d.Runs.Snapshot()
			for i, r := range runs {
				events = append(events, timelineEvent{r.End, fmt.Sprintf("run %d of %s ended: %s", i+1, d.Host, r)})
			}
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "\n  %-9s %s", tl.s.Since(e.at), e.what)
	}
	what := "alerts"
	if t.Failed() {
		what = "alerts and probe runs"
	}
	t.Logf("timeline of the %s (t+0 is when the daemons were up):%s", what, b.String())
}
