//go:build integration

package dashboards

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

const (
	// A fleet of four clients of one file system: the fewest for which
	// PlateauFileSystemRegression's "at least two low nodes, and a
	// quarter of them" means two nodes, and one node alone is a quarter,
	// which the "at least two" must keep a node alert; one node at the
	// bound of its low score (-4) makes the evidence -4 / √4 = -2, two
	// make -4, both short of the page's -5, and three make -6.
	fleetSize = 4

	// fleetInterval is each daemon's probe interval, splayed by host name
	// as in production. The four runs of a round take four slots a
	// quarter of the interval apart: 1.25s, against ~0.85s for a run at
	// the fleet's plateau, so unthrottled runs do not overlap. The slot
	// spacing is also how far apart two nodes' verdicts fall when the
	// storage slows down for all of them: the file system alert fires
	// when the second node's score falls, and must fire before the first
	// node's page, so the spacing must stay well under the difference of
	// the two alerts' `for` (checked below).
	fleetInterval = 5 * time.Second
	fleetTimeout  = 4 * time.Second

	// Small probes at a modest plateau per node: 64 MiB at 150 MB/s each
	// way. Four nodes at once are then 600 MB/s, a fraction of what the
	// RAM-backed device gives, so that even when runs meet they do not
	// slow each other down, and no contention looks like a regression.
	fleetFileSize = 64 << 20
	fleetPlateau  = 150e6

	// fleetCalmRounds rounds unthrottled (a round is every daemon running
	// once): the change ratio needs 17 runs and the low score 11, and 30
	// leave each node 23 runs of normal, as the production statistic has
	// after a day.
	fleetCalmRounds = 30
)

// TestFleetAlerts runs four daemons, each with its own host name, port,
// history file and blkio cgroup, probing one shared loop-mounted file
// system under one target name, so that the fleet rules see them as peers;
// one Prometheus with the shipped rules, one Alertmanager with the shipped
// route and inhibitions.
//
//   - (c) 30 unthrottled rounds: no page.
//   - (a) one node's reads throttled to 40% in its own cgroup, a client
//     problem: PlateauProbeRegression for that node only, and no
//     PlateauFileSystemRegression; resolved once lifted.
//   - (b) every node's reads and writes throttled to 40%, a storage
//     problem (one that slows every op: a fault that slows reads alone
//     scores a node with a read and a write op (-4 + 0)/√2 = -2.8, and
//     four such nodes make -5.7, at the edge of the page's -5; the
//     smallest fleet is asserted on a fault it must page on):
//     PlateauFileSystemRegression pages on the nodes' low scores added
//     up (target:plateau_probe_low_score:evidence), and Alertmanager
//     inhibits the node pages it explains, from the first one until they
//     resolve.
func TestFleetAlerts(t *testing.T) {
	hosts := spreadHosts(t, fleetSize, fleetInterval)
	s := startStack(t, stackOptions{
		hosts:               hosts,
		interval:            fleetInterval,
		timeout:             fleetTimeout,
		splay:               true,
		fileSize:            fleetFileSize,
		plateau:             fleetPlateau,
		characterizeSpacing: time.Second,
		promInterval:        time.Second,
	})
	tl := s.watchAlerts(t)
	// What the inhibition can absorb: the file system alert fires this
	// much sooner after it pends than a node page after the node's
	// verdict, and the second node's verdict comes about a slot after the
	// first one's; as much again covers the scrapes and rule evaluations
	// (1s each) between a verdict and its alert. Production has the same relation at a larger scale
	// (15m / nodes against the same difference times durationScale).
	head := s.shortFor[regressionAlert][0] - s.shortFor[fsRegressionAlert][0]
	if spacing := fleetInterval / fleetSize; head < 2*spacing {
		t.Fatalf("%s fires only %s before %s after they pend, under two slots (%s) of the fleet's schedule: node pages would reach the on-call before the file system alert inhibits them", fsRegressionAlert, head, regressionAlert, 2*spacing)
	}
	for _, d := range s.daemons {
		t.Logf("%s: instance %s, %s, history %s", d.host, d.addr, d.cgroup, d.historyFile)
	}

	// Phase (c): calm.
	tl.mark(t, "phase (c): %d unthrottled rounds", fleetCalmRounds)
	waitFor(t, fmt.Sprintf("%d rounds of unthrottled runs", fleetCalmRounds), fleetCalmRounds*3*fleetInterval+2*time.Minute, func() (bool, error) {
		return s.rounds() >= fleetCalmRounds, nil
	})
	s.waitEvaluatedPastRuns(t)
	waitChangeRatio(t, s, time.Minute)
	calmEnd := tl.mark(t, "%d rounds done", s.rounds())
	if err := noFiringCritical(t, s, s.start, "while unthrottled"); err != nil {
		t.Fatal(err)
	}
	medianRead, medianWrite := map[*stackDaemon]float64{}, map[*stackDaemon]float64{}
	for _, d := range s.daemons {
		medianRead[d], medianWrite[d] = d.runs.medianRate("read", calmEnd), d.runs.medianRate("write", calmEnd)
		runs, _ := d.runs.snapshot()
		t.Logf("%s unthrottled: median read %.0f MB/s, write %.0f MB/s over %d runs; last run %s",
			d.host, medianRead[d]/1e6, medianWrite[d]/1e6, len(runs), runs[len(runs)-1])
	}
	s.logOverlaps(t, s.start, calmEnd)

	// Phase (a): one node.
	victim := s.daemons[1]
	limit := int64(throttleFraction * medianRead[victim])
	readBefore, err := victim.cgroup.ReadBytes()
	if err != nil {
		t.Fatal(err)
	}
	aStart := tl.mark(t, "phase (a): THROTTLED reads of %s alone to %.0f MB/s, 40%% of its unthrottled %.0f MB/s", victim.host, float64(limit)/1e6, medianRead[victim]/1e6)
	if err := victim.cgroup.ThrottleRead(limit); err != nil {
		t.Fatal(err)
	}
	s.checkThrottleBites(t, victim, aStart, medianRead[victim], readBefore)
	victimRead := func(a receivedAlert) bool {
		return a.Labels["alertname"] == regressionAlert && a.Labels["instance"] == victim.addr && namesOp(a, stackProbe, "read")
	}
	var fired receivedAlert
	waitFor(t, "the webhook to receive "+regressionAlert+" for "+victim.host, 4*time.Minute, func() (bool, error) {
		a, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "firing" && victimRead(a) && !a.At.Before(aStart) })
		fired = a
		return ok, nil
	})
	tl.mark(t, "FIRED: the webhook received %s for %s, %s after the throttle", regressionAlert, victim.host, fired.At.Sub(aStart).Round(time.Second))
	checkFiredAlert(t, s, fired, victim)
	s.logEvidence(t, stackTarget)
	aLift := tl.mark(t, "LIFTED the throttle of %s", victim.host)
	if err := victim.cgroup.ThrottleRead(fleetPlateau); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the page of "+victim.host+" to resolve", 4*time.Minute, func() (bool, error) {
		if held, err := s.heldIn(regressionAlert, victim.addr); err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus still holds %d %s for %s (%v)", len(held), regressionAlert, victim.host, err)
		}
		_, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "resolved" && a.Fingerprint == fired.Fingerprint })
		return ok, fmt.Errorf("no resolved notification yet")
	})
	aEnd := tl.mark(t, "RESOLVED: %s's page, %s after the lift", victim.host, time.Since(aLift).Round(time.Second))
	// One node is a node problem: its peers did not page, and the file
	// system alert did not fire, at any evaluation of the phase.
	s.checkNoneFired(t, aStart, `ALERTS{alertname="`+fsRegressionAlert+`"}`, "with one node throttled")
	s.checkNoneFired(t, aStart, `ALERTS{alertname="`+regressionAlert+`",instance!="`+victim.addr+`"}`, "on the peers of the throttled node")
	for _, a := range s.hook.received() {
		if !a.At.Before(aStart) && !victimRead(a) {
			t.Errorf("phase (a): the webhook received %s %s at %s; only %s's read page was expected", a.Status, s.alertKey(a.Labels), s.since(a.At), victim.host)
		}
	}

	// Phase (b): the storage, every node at once.
	limits := map[*stackDaemon]int64{}
	reads := map[*stackDaemon]int64{}
	for _, d := range s.daemons {
		limits[d] = int64(throttleFraction * medianRead[d])
		if reads[d], err = d.cgroup.ReadBytes(); err != nil {
			t.Fatal(err)
		}
	}
	bStart := tl.mark(t, "phase (b): THROTTLED reads and writes of every node to 40%% of its unthrottled rates")
	for _, d := range s.daemons {
		if err := d.cgroup.ThrottleRead(limits[d]); err != nil {
			t.Fatal(err)
		}
		if err := d.cgroup.ThrottleWrite(int64(throttleFraction * medianWrite[d])); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range s.daemons {
		s.checkThrottleBites(t, d, bStart, medianRead[d], reads[d])
	}
	isFS := func(a receivedAlert) bool {
		return a.Labels["alertname"] == fsRegressionAlert && a.Labels["target"] == stackTarget
	}
	var fsFired receivedAlert
	waitFor(t, "the webhook to receive "+fsRegressionAlert, 4*time.Minute, func() (bool, error) {
		a, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "firing" && isFS(a) })
		fsFired = a
		return ok, nil
	})
	tl.mark(t, "FIRED: the webhook received %s, %s after the throttle", fsRegressionAlert, fsFired.At.Sub(bStart).Round(time.Second))
	checkFSAlert(t, s, fsFired, stackTarget)
	s.logEvidence(t, stackTarget)
	// Every node's page reaches Alertmanager (Prometheus sends them once
	// they fire), and every one is held back by the file system alert.
	var amState string
	waitFor(t, "Alertmanager to hold every node's page inhibited by "+fsRegressionAlert, 3*time.Minute, func() (bool, error) {
		alerts, err := s.amAlerts(`alertname="` + regressionAlert + `"`)
		if err != nil {
			return false, err
		}
		var states []string
		inhibited := map[string]bool{}
		for _, a := range alerts {
			st := a.Status.State
			if slices.Contains(a.Status.InhibitedBy, fsFired.Fingerprint) {
				st += " by " + fsRegressionAlert
			}
			states = append(states, s.alertKey(a.Labels)+": "+st)
			if a.Status.State == "suppressed" && slices.Contains(a.Status.InhibitedBy, fsFired.Fingerprint) {
				inhibited[a.Labels["instance"]] = true
			}
		}
		sort.Strings(states)
		amState = strings.Join(states, "; ")
		return len(inhibited) == len(s.daemons), fmt.Errorf("%s", amState)
	})
	tl.mark(t, "Alertmanager holds every node's page suppressed: %s", amState)
	bLift := tl.mark(t, "LIFTED the throttle of every node")
	for _, d := range s.daemons {
		if err := d.cgroup.ThrottleRead(fleetPlateau); err != nil {
			t.Fatal(err)
		}
		if err := d.cgroup.ThrottleWrite(fleetPlateau); err != nil {
			t.Fatal(err)
		}
	}
	// The episode ends with the node pages resolved at Prometheus and the
	// file system alert resolved at the webhook: its keep_firing_for
	// outlasts the nodes' recovery, so no node page leaks at the end.
	waitFor(t, "every page of phase (b) to resolve", 5*time.Minute, func() (bool, error) {
		if held, err := s.heldIn(regressionAlert, ""); err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus still holds %d %s (%v)", len(held), regressionAlert, err)
		}
		if _, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "resolved" && a.Fingerprint == fsFired.Fingerprint }); !ok {
			return false, fmt.Errorf("no resolved notification of %s yet", fsRegressionAlert)
		}
		return allResolved(s.hook.received())
	})
	tl.mark(t, "RESOLVED: every page of phase (b), %s after the lift", time.Since(bLift).Round(time.Second))
	for _, a := range s.hook.received() {
		if !a.At.Before(bStart) && !isFS(a) {
			t.Errorf("phase (b): the webhook received %s %s at %s; the file system alert should have inhibited it", a.Status, s.alertKey(a.Labels), s.since(a.At))
		}
	}
	s.logOverlaps(t, aEnd, time.Now())
}

// spreadHosts picks n host names whose slots for the stack's probe are
// spread evenly over the interval, with the daemon's own SlotOffset: the
// runs of a fleet named so take turns on the device instead of meeting by
// chance, as a real fleet's many nodes average out.
func spreadHosts(t *testing.T, n int, interval time.Duration) []string {
	t.Helper()
	offset := func(h string) time.Duration { return schedule.SlotOffset(h, stackTarget, stackProbe, interval) }
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

// waitEvaluatedPastRuns waits until Prometheus has scraped every daemon's
// last run and evaluated the rules on it, so that a check over the rule
// results covers every run so far.
func (s *alertStack) waitEvaluatedPastRuns(t *testing.T) {
	t.Helper()
	var last time.Time
	for _, d := range s.daemons {
		runs, _ := d.runs.snapshot()
		if n := len(runs); n > 0 && runs[n-1].End.After(last) {
			last = runs[n-1].End
		}
	}
	// Where the nodes are scraped, and where the fleet's alerts read the
	// verdicts (the same server, or the global one's copies of them).
	q := `timestamp(instance_target:plateau_probe_regression:max{job="` + stackJob + `"})`
	for _, where := range []func(string) ([]promSample, error){s.prom.queryNodes, s.prom.fleet.query} {
		waitFor(t, "Prometheus to evaluate the rules past the last run of every daemon", 2*time.Minute, func() (bool, error) {
			got, err := where(q)
			if err != nil {
				return false, err
			}
			if len(got) != len(s.daemons) {
				return false, fmt.Errorf("%d of %d nodes have a regression verdict", len(got), len(s.daemons))
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

// checkThrottleBites fails the test unless d's first run that started
// after t0 read at under half its unthrottled rate, with the accounting of
// its cgroup to say why not.
func (s *alertStack) checkThrottleBites(t *testing.T, d *stackDaemon, t0 time.Time, unthrottled float64, readBefore int64) {
	t.Helper()
	run := d.runs.firstRunStartedAfter(t, "the throttle of "+d.host, t0, s.opts.interval)
	readAfter, err := d.cgroup.ReadBytes()
	if err != nil {
		t.Fatal(err)
	}
	if run.Rate["read"] >= 0.5*unthrottled {
		t.Fatalf("the throttle of %s does not bite: its first run after it read at %.0f MB/s, not under half its unthrottled %.0f MB/s (%s accounted %d MiB of reads since the throttle, so the probe's bios %s)",
			d.host, run.Rate["read"]/1e6, unthrottled/1e6, d.cgroup, (readAfter-readBefore)>>20,
			map[bool]string{true: "are charged to the group", false: "are NOT charged to the group"}[readAfter > readBefore])
	}
	t.Logf("%s: first throttled run of %s: %s", s.since(run.End), d.host, run)
}

// checkNoneFired fails the test if an alert of selector fired at any
// evaluation since t0; pending ones are logged as noise.
func (s *alertStack) checkNoneFired(t *testing.T, t0 time.Time, selector, when string) {
	t.Helper()
	sel := strings.TrimSuffix(selector, "}")
	for _, state := range []string{"firing", "pending"} {
		got, err := s.prom.countOverRange(sel+`,alertstate="`+state+`"}`, t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if state == "firing" {
				t.Errorf("%s fired %s (%g evaluations)", s.alertKey(g.Metric), when, g.Value)
			} else {
				t.Logf("noise %s: %s pending for %g evaluations", when, s.alertKey(g.Metric), g.Value)
			}
		}
	}
}

// checkFSAlert checks what the on-call sees of the file system page of
// target.
func checkFSAlert(t *testing.T, s *alertStack, a receivedAlert, target string) {
	t.Helper()
	want := map[string]string{"alertname": fsRegressionAlert, "severity": "critical", "target": target, "filesystem": target, "job": "plateau"}
	for k, v := range want {
		if a.Labels[k] != v {
			t.Errorf("%s label %s=%q, want %q (labels %v)", fsRegressionAlert, k, a.Labels[k], v, a.Labels)
		}
	}
	if in, ok := a.Labels["instance"]; ok {
		t.Errorf("%s carries instance %q: it is one alert for the file system", fsRegressionAlert, in)
	}
	d := strings.Join(strings.Fields(a.Annotations["description"]), " ")
	if strings.Contains(d, "{{") || !strings.Contains(d, fmt.Sprintf(" of %d nodes", len(s.daemons))) || !strings.Contains(d, "%") {
		t.Errorf("%s's description was not expanded with the nodes in regression of the %d: %q", fsRegressionAlert, len(s.daemons), d)
	}
	if !strings.HasSuffix(a.Annotations["runbook_url"], "#"+strings.ToLower(fsRegressionAlert)) {
		t.Errorf("%s's runbook_url %q does not point at its runbook section", fsRegressionAlert, a.Annotations["runbook_url"])
	}
	t.Logf("%s annotations: summary %q; description %q", fsRegressionAlert, a.Annotations["summary"], d)
}

// logEvidence logs what the file-system page of target decides on, as
// Prometheus has it now: each node's low score and the fleet's evidence
// and counts.
func (s *alertStack) logEvidence(t *testing.T, target string) {
	t.Helper()
	var parts []string
	for _, q := range []string{"plateau_probe_target_low_score", "target:plateau_probe_low_score:evidence",
		"target:plateau_probe_low_nodes:sum", "target:plateau_probe_low_score_nodes:count"} {
		got, err := s.prom.fleet.query(q + `{target="` + target + `"}`)
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

// logOverlaps logs how many runs between from and to overlapped a run of
// another daemon: the schedule is meant to keep that rare, and when a test
// fails on a slow run it says whether contention could be the cause.
func (s *alertStack) logOverlaps(t *testing.T, from, to time.Time) {
	t.Helper()
	type span struct {
		host       string
		start, end time.Time
	}
	var spans []span
	for _, d := range s.daemons {
		runs, _ := d.runs.snapshot()
		for _, r := range runs {
			if r.Start().After(from) && r.End.Before(to) {
				spans = append(spans, span{d.host, r.Start(), r.End})
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
	t.Logf("%d of %d runs from %s to %s overlapped a run of another daemon", overlapping, len(spans), s.since(from), s.since(to))
}
