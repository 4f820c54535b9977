package alertstack

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

// WaitChangeRatio waits until Prometheus has plateau_probe_change_ratio
// for both ops of every daemon of the stack.
func WaitChangeRatio(t *testing.T, s *Stack, timeout time.Duration) {
	t.Helper()
	want := 2 * len(s.Daemons)
	WaitFor(t, "plateau_probe_change_ratio of every daemon's write and read in Prometheus", timeout, func() (bool, error) {
		got, err := s.Prom.Query(`plateau_probe_change_ratio{job="plateau"}`)
		if err == nil && len(got) != want {
			err = fmt.Errorf("%d of %d series after %d rounds of runs", len(got), want, s.Rounds())
		}
		return err == nil, err
	})
	t.Logf("%s: plateau_probe_change_ratio present for every daemon after %d rounds of runs", s.Since(time.Now()), s.Rounds())
}

// CheckFiredAlert checks what the on-call sees of a node's read page.
func CheckFiredAlert(t *testing.T, s *Stack, a ReceivedAlert, d *Daemon) {
	t.Helper()
	want := map[string]string{
		"alertname": RegressionAlert,
		"severity":  "critical",
		"target":    Target,
		"job":       "plateau",
		"instance":  d.Addr,
	}
	for k, v := range want {
		if a.Labels[k] != v {
			s.Errorf(t, "fired alert label %s=%q, want %q (labels %v)", k, a.Labels[k], v, a.Labels)
		}
	}
	for _, k := range []string{"summary", "description", "runbook_url"} {
		if strings.TrimSpace(a.Annotations[k]) == "" {
			s.Errorf(t, "fired alert has no %s annotation: %v", k, a.Annotations)
		}
	}
	// The description's templates expanded against the real series: it
	// names the target, gives the change and the plateau ratios as
	// percentages, and counts the nodes in regression out of their peers:
	// those its Prometheus scrapes (on a split stack, its rack's).
	d0 := a.Annotations["description"]
	if !NamesOp(a, Probe, "read") {
		s.Errorf(t, "fired alert's description does not name the read op of %s: %q", Probe, d0)
	}
	if strings.Contains(d0, "{{") || !strings.Contains(d0, Target) || strings.Count(d0, "%") < 2 || strings.Contains(d0, "unknown fraction") {
		s.Errorf(t, "fired alert's description was not expanded with the alert's target and values: %q", d0)
	}
	peers := len(s.rackOf(d))
	if flat := strings.Join(strings.Fields(d0), " "); !strings.Contains(flat, fmt.Sprintf(" of %d nodes of %s", peers, Target)) {
		s.Errorf(t, "fired alert's description does not count the nodes in regression of the %d of %s its Prometheus scrapes: %q", peers, Target, d0)
	}
	if !strings.HasSuffix(a.Annotations["runbook_url"], "#"+strings.ToLower(RegressionAlert)) {
		s.Errorf(t, "fired alert's runbook_url %q does not point at its runbook section", a.Annotations["runbook_url"])
	}
	t.Logf("fired alert annotations: summary %q; description %q; runbook_url %q", a.Annotations["summary"], d0, a.Annotations["runbook_url"])
}

// SpreadHosts picks n host names whose slots for the stack's probe are
// spread evenly over the interval, with the daemon's own SlotOffset: the
// runs of a fleet named so take turns on the device instead of meeting by
// chance, as a real fleet's many nodes average out.
func SpreadHosts(t *testing.T, n int, interval time.Duration) []string {
	t.Helper()
	offset := func(h string) time.Duration { return schedule.SlotOffset(h, Target, Probe, interval) }
	dist := func(a, b time.Duration) time.Duration { // circular
		d := (a - b + interval) % interval
		return min(d, interval-d)
	}
	hosts := []string{"node001"}
	base := offset(hosts[0])
	for k := 1; k < n; k++ {
		want := (base + interval*time.Duration(k)/time.Duration(n)) % interval
		best := ""
		for i := 2; i < 1000; i++ {
			h := fmt.Sprintf("node%03d", i)
			if !slices.Contains(hosts, h) && (best == "" || dist(offset(h), want) < dist(offset(best), want)) {
				best = h
			}
		}
		hosts = append(hosts, best)
	}
	var offs []time.Duration
	var desc []string
	for _, h := range hosts {
		offs = append(offs, offset(h))
		desc = append(desc, fmt.Sprintf("%s at %s", h, offset(h).Round(time.Millisecond)))
	}
	slices.Sort(offs)
	for i := range offs {
		gap := (offs[(i+1)%n] - offs[i] + interval) % interval
		if gap < interval/time.Duration(n)*9/10 {
			t.Fatalf("no even spread of %d slots over %s among the candidate names: %v", n, interval, desc)
		}
	}
	t.Logf("host names with slots spread over the %s interval: %s", interval, strings.Join(desc, ", "))
	return hosts
}

// WaitEvaluatedPastRuns waits until Prometheus has scraped every daemon's
// last run and evaluated the rules on it, so that a check over the rule
// results covers every run so far.
func (s *Stack) WaitEvaluatedPastRuns(t *testing.T) {
	t.Helper()
	var last time.Time
	for _, d := range s.Daemons {
		runs, _ := d.Runs.Snapshot()
		if n := len(runs); n > 0 && runs[n-1].End.After(last) {
			last = runs[n-1].End
		}
	}
	// Where the nodes are scraped, and where the fleet's alerts read the
	// verdicts (the same server, or the global one's copies of them).
	q := `timestamp(instance_target:plateau_probe_regression:max{job="` + Job + `"})`
	for _, where := range []func(string) ([]Sample, error){s.Prom.QueryNodes, s.Prom.fleet.query} {
		WaitFor(t, "Prometheus to evaluate the rules past the last run of every daemon", 2*time.Minute, func() (bool, error) {
			got, err := where(q)
			if err != nil {
				return false, err
			}
			if len(got) != len(s.Daemons) {
				return false, fmt.Errorf("%d of %d nodes have a regression verdict", len(got), len(s.Daemons))
			}
			for _, g := range got {
				if g.Value <= float64(last.Unix())+2 {
					return false, nil
				}
			}
			return true, nil
		})
	}
}

// CheckFSAlert checks what the on-call sees of the file system page of
// target.
func CheckFSAlert(t *testing.T, s *Stack, a ReceivedAlert, target string) {
	t.Helper()
	want := map[string]string{"alertname": FsRegressionAlert, "severity": "critical", "target": target, "filesystem": target, "job": "plateau"}
	for k, v := range want {
		if a.Labels[k] != v {
			s.Errorf(t, "%s label %s=%q, want %q (labels %v)", FsRegressionAlert, k, a.Labels[k], v, a.Labels)
		}
	}
	if in, ok := a.Labels["instance"]; ok {
		s.Errorf(t, "%s carries instance %q: it is one alert for the file system", FsRegressionAlert, in)
	}
	d := strings.Join(strings.Fields(a.Annotations["description"]), " ")
	if strings.Contains(d, "{{") || !strings.Contains(d, fmt.Sprintf(" of %d nodes", len(s.Daemons))) || !strings.Contains(d, "%") {
		s.Errorf(t, "%s's description was not expanded with the nodes in regression of the %d: %q", FsRegressionAlert, len(s.Daemons), d)
	}
	if !strings.HasSuffix(a.Annotations["runbook_url"], "#"+strings.ToLower(FsRegressionAlert)) {
		s.Errorf(t, "%s's runbook_url %q does not point at its runbook section", FsRegressionAlert, a.Annotations["runbook_url"])
	}
	t.Logf("%s annotations: summary %q; description %q", FsRegressionAlert, a.Annotations["summary"], d)
}

// LogEvidence logs what the file-system page of target decides on, as
// Prometheus has it now: each node's low score and the fleet's evidence
// and counts.
func (s *Stack) LogEvidence(t *testing.T, target string) {
	t.Helper()
	var parts []string
	for _, q := range []string{"plateau_probe_target_low_score", "target:plateau_probe_low_score:evidence",
		"target:plateau_probe_low_nodes:sum", "target:plateau_probe_low_score_nodes:count"} {
		got, err := s.Prom.fleet.query(q + `{target="` + target + `"}`)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			name := q
			if in, ok := g.Metric["instance"]; ok {
				name += "{" + in + "}"
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", name, g.Value))
		}
	}
	sort.Strings(parts)
	t.Logf("the file-system page's evidence now: %s", strings.Join(parts, "; "))
}

// LogPageMargins logs, per target, how near the file-system page came
// from since until now: the lowest evidence, alone and at the evaluations
// with two or three nodes clearly low (what the verdict's readings ask
// for beside it), the lowest median ratio, the most nodes clearly low and
// the highest verdict. A calm that fires the page, on a CI machine whose
// log is cut, then says which of them crossed; one that holds says by
// how much.
func (s *Stack) LogPageMargins(t *testing.T, since time.Time) {
	t.Helper()
	const evidence, lowNodes = "target:plateau_probe_low_score:evidence", "target:plateau_probe_low_nodes:sum"
	window := rangeSince(since)
	margins := []struct{ name, query string }{
		{"lowest evidence", fmt.Sprintf("min_over_time(%s[%s])", evidence, window)},
		{"with 2+ nodes low", fmt.Sprintf("min_over_time((%s and on (job, target) %s >= 2)[%s:])", evidence, lowNodes, window)},
		{"with 3+", fmt.Sprintf("min_over_time((%s and on (job, target) %s >= 3)[%s:])", evidence, lowNodes, window)},
		{"lowest median ratio", fmt.Sprintf("min_over_time(target:plateau_probe_normal_ratio:median[%s])", window)},
		{"most nodes low", fmt.Sprintf("max_over_time(%s[%s])", lowNodes, window)},
		{"of", fmt.Sprintf("max_over_time(target:plateau_probe_low_score_nodes:count[%s])", window)},
		{"highest verdict", fmt.Sprintf("max_over_time(target:plateau_probe_fleet_low:verdict[%s])", window)},
	}
	// values[target][i] is margins[i]'s, "none" where no evaluation had it.
	values := map[string][]string{}
	for i, m := range margins {
		got, err := s.Prom.fleet.query(m.query)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			tg := g.Metric["target"]
			if values[tg] == nil {
				values[tg] = slices.Repeat([]string{"none"}, len(margins))
			}
			// + 0 turns the verdict's -0 (evidence * 0) into 0.
			values[tg][i] = fmt.Sprintf("%.2f", g.Value+0)
		}
	}
	for _, tg := range slices.Sorted(maps.Keys(values)) {
		parts := make([]string, len(margins))
		for i, m := range margins {
			parts[i] = m.name + " " + values[tg][i]
		}
		t.Logf("the file-system page of %s since %s: %s", tg, s.Since(since), strings.Join(parts, ", "))
	}
}

// LogOverlaps logs how many runs between from and to overlapped a run of
// another daemon: the schedule is meant to keep that rare, and when a test
// fails on a slow run it says whether contention could be the cause.
func (s *Stack) LogOverlaps(t *testing.T, from, to time.Time) {
	t.Helper()
	type span struct {
		host       string
		start, end time.Time
	}
	var spans []span
	for _, d := range s.Daemons {
		runs, _ := d.Runs.Snapshot()
		for _, r := range runs {
			if r.Start().After(from) && r.End.Before(to) {
				spans = append(spans, span{d.Host, r.Start(), r.End})
			}
		}
	}
	overlapping := 0
	for i, a := range spans {
		for j, b := range spans {
			if i != j && a.host != b.host && a.start.Before(b.end) && b.start.Before(a.end) {
				overlapping++
				break
			}
		}
	}
	t.Logf("%d of %d runs from %s to %s overlapped a run of another daemon", overlapping, len(spans), s.Since(from), s.Since(to))
}

// NamesOp says whether the alert's description names the op of the probe
// as one of its ops in regression or under plateau ("seq read (sequential)
// at ..."): the verdict alerts are per node and target, and their
// descriptions list the ops.
func NamesOp(a ReceivedAlert, probe, op string) bool {
	return strings.Contains(strings.Join(strings.Fields(a.Annotations["description"]), " "), probe+" "+op+" (")
}

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
	s.timeline = tl
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

// Mark records a step of the test.
func (tl *Timeline) Mark(t *testing.T, format string, args ...any) time.Time {
	t.Helper()
	now := time.Now()
	what := fmt.Sprintf(format, args...)
	tl.Add(t, now, "TEST: "+what)
	return now
}

// lastMark is the test's latest step (Mark), and when it was marked;
// false before the first.
func (tl *Timeline) lastMark() (time.Time, string, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for i := len(tl.events) - 1; i >= 0; i-- {
		if e := tl.events[i]; strings.HasPrefix(e.what, "TEST: ") {
			return e.at, e.what, true
		}
	}
	return time.Time{}, "", false
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
	// Read before the servers stop: a scrape that failed under load makes
	// a node's series stale, which resets a pending alert and drops the
	// node from the counts its descriptions give.
	health, err := tl.s.scrapeHealth(tl.s.Start)
	if err != nil {
		health = "scrape health unknown: " + err.Error()
	}
	health = "scrapes of the daemons since t+0: " + health
	t.Log(health)
	tl.s.noteForDigest(health)
}

// scrapeHealth says how many of the daemons' scrapes since failed, by
// node, and how long the slowest one took.
func (s *Stack) scrapeHealth(since time.Time) (string, error) {
	w := rangeSince(since)
	sel := fmt.Sprintf(`{job=~%q}`, Job+"|"+ServerJob)
	total, err := s.Prom.QueryNodes(fmt.Sprintf("count_over_time(up%s[%s])", sel, w))
	if err != nil {
		return "", err
	}
	failed, err := s.Prom.QueryNodes(fmt.Sprintf("count_over_time(up%s[%s]) - sum_over_time(up%s[%s])", sel, w, sel, w))
	if err != nil {
		return "", err
	}
	slowest, err := s.Prom.QueryNodes(fmt.Sprintf("max_over_time(scrape_duration_seconds%s[%s])", sel, w))
	if err != nil {
		return "", err
	}
	var n, bad, worst float64
	for _, g := range total {
		n += g.Value
	}
	var by []string
	for _, g := range failed {
		if g.Value > 0 {
			bad += g.Value
			by = append(by, fmt.Sprintf("%s %.0f", s.HostOf(g.Metric["instance"]), g.Value))
		}
	}
	for _, g := range slowest {
		worst = max(worst, g.Value)
	}
	sort.Strings(by)
	out := fmt.Sprintf("%.0f of %.0f failed", bad, n)
	if len(by) > 0 {
		out += " (" + strings.Join(by, ", ") + ")"
	}
	return out + fmt.Sprintf(", the slowest took %.0f ms (timeout %s)", worst*1000, s.Opts.PromInterval), nil
}

// WithMatcher adds a label matcher (e.g. `severity!="none"`) to a metric
// selector, with or without braces: ALERTS becomes ALERTS{m}, and
// ALERTS{a="b"} becomes ALERTS{a="b",m}.
func WithMatcher(selector, matcher string) string {
	sel := strings.TrimSuffix(selector, "}")
	switch {
	case !strings.Contains(sel, "{"):
		sel += "{"
	case !strings.HasSuffix(sel, "{"):
		sel += ","
	}
	return sel + matcher + "}"
}

// FiredSince says, one line each, which alerts of selector (a selector
// of ALERTS) fired at any evaluation since t0, on any Prometheus; those
// only pending are logged as noise. when says under what, for both.
func (s *Stack) FiredSince(t *testing.T, t0 time.Time, selector, when string) []string {
	t.Helper()
	var fired []string
	for _, state := range []string{"firing", "pending"} {
		got, err := s.Prom.CountOverRange(WithMatcher(selector, `alertstate="`+state+`"`), t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if state == "firing" {
				fired = append(fired, fmt.Sprintf("%s fired %s (%g evaluations)", s.AlertKey(g.Metric), when, g.Value))
			} else {
				t.Logf("noise %s: %s pending for %g evaluations", when, s.AlertKey(g.Metric), g.Value)
			}
		}
	}
	return fired
}
