//go:build integration

package dashboards

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
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
//     PlateauFileSystemRegression; resolved once lifted. An attempt
//     whose checks fail while a peer was itself low (machine noise) is
//     repeated, up to nodeAloneAttempts times.
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
	hosts := alertstack.SpreadHosts(t, fleetSize, fleetInterval)
	s := alertstack.Start(t, alertstack.Options{
		Hosts:               hosts,
		Interval:            fleetInterval,
		Timeout:             fleetTimeout,
		Splay:               true,
		FileSize:            fleetFileSize,
		Plateau:             fleetPlateau,
		CharacterizeSpacing: time.Second,
		PromInterval:        time.Second,
	})
	tl := s.WatchAlerts(t)
	// What the inhibition can absorb: the file system alert fires this
	// much sooner after it pends than a node page after the node's
	// verdict, and the second node's verdict comes about a slot after the
	// first one's; as much again covers the scrapes and rule evaluations
	// (1s each) between a verdict and its alert. Production has the same relation at a larger scale
	// (15m / nodes against the same difference times durationScale).
	head := s.ShortFor[alertstack.RegressionAlert][0] - s.ShortFor[alertstack.FsRegressionAlert][0]
	if spacing := fleetInterval / fleetSize; head < 2*spacing {
		s.Fatalf(t, "%s fires only %s before %s after they pend, under two slots (%s) of the fleet's schedule: node pages would reach the on-call before the file system alert inhibits them", alertstack.FsRegressionAlert, head, alertstack.RegressionAlert, 2*spacing)
	}
	for _, d := range s.Daemons {
		t.Logf("%s: instance %s, %s, history %s", d.Host, d.Addr, d.Cgroup, d.HistoryFile)
	}

	// Phase (c): calm.
	tl.Mark(t, "phase (c): %d unthrottled rounds", fleetCalmRounds)
	s.WaitFor(t, fmt.Sprintf("%d rounds of unthrottled runs", fleetCalmRounds), fleetCalmRounds*3*fleetInterval+2*time.Minute, func() (bool, error) {
		return s.Rounds() >= fleetCalmRounds, nil
	})
	s.WaitEvaluatedPastRuns(t)
	alertstack.WaitChangeRatio(t, s, time.Minute)
	calmEnd := tl.Mark(t, "%d rounds done", s.Rounds())
	if err := noFiringCritical(t, s, s.Start, "while unthrottled"); err != nil {
		t.Fatal(err)
	}
	medianRead, medianWrite := map[*alertstack.Daemon]float64{}, map[*alertstack.Daemon]float64{}
	for _, d := range s.Daemons {
		medianRead[d], medianWrite[d] = d.Runs.MedianRate("read", calmEnd), d.Runs.MedianRate("write", calmEnd)
		runs, _ := d.Runs.Snapshot()
		t.Logf("%s unthrottled: median read %.0f MB/s, write %.0f MB/s over %d runs; last run %s",
			d.Host, medianRead[d]/1e6, medianWrite[d]/1e6, len(runs), runs[len(runs)-1])
	}
	s.LogOverlaps(t, s.Start, calmEnd)

	// Phase (a): one node. A busy machine can slow a peer's run in the
	// same interval as the throttle (a peer read at 0.55 of its normal
	// beside a CPU hog here), and with two nodes low the file system
	// page is right to fire; its incident then holds the victim's own
	// page back. Such an attempt says nothing of one node alone: if a
	// check fails, it is repeated once the fleet has recovered. An
	// attempt whose peers all stayed at their normal must pass every
	// check.
	victim := s.Daemons[1]
	var aEnd time.Time
	for attempt := 1; ; attempt++ {
		var disturbed string
		if aEnd, disturbed = nodeAlonePhase(s, t, tl, victim, medianRead[victim]); disturbed == "" {
			break
		}
		if attempt == nodeAloneAttempts {
			s.Fatalf(t, "phase (a): all %d attempts were disturbed by noise on the peers (the last: %s); the machine is too busy for one node alone to be the only one low", attempt, disturbed)
		}
		tl.Mark(t, "phase (a), attempt %d, DISTURBED: %s; repeated once the fleet has recovered", attempt, disturbed)
		waitFleetRecovered(s, t)
	}

	// Phase (b): the storage, every node at once.
	limits := map[*alertstack.Daemon]int64{}
	reads := map[*alertstack.Daemon]int64{}
	for _, d := range s.Daemons {
		limits[d] = int64(alertstack.ThrottleFraction * medianRead[d])
		var err error
		if reads[d], err = d.Cgroup.ReadBytes(); err != nil {
			t.Fatal(err)
		}
	}
	bStart := tl.Mark(t, "phase (b): THROTTLED reads and writes of every node to 40%% of its unthrottled rates")
	for _, d := range s.Daemons {
		if err := d.Cgroup.ThrottleRead(limits[d]); err != nil {
			t.Fatal(err)
		}
		if err := d.Cgroup.ThrottleWrite(int64(alertstack.ThrottleFraction * medianWrite[d])); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range s.Daemons {
		checkThrottleBites(s, t, d, bStart, medianRead[d], reads[d])
	}
	isFS := func(a alertstack.ReceivedAlert) bool {
		return a.Labels["alertname"] == alertstack.FsRegressionAlert && a.Labels["target"] == alertstack.Target
	}
	var fsFired alertstack.ReceivedAlert
	s.WaitFor(t, "the webhook to receive "+alertstack.FsRegressionAlert, 4*time.Minute, func() (bool, error) {
		a, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool { return a.Status == "firing" && isFS(a) && !a.At.Before(bStart) })
		fsFired = a
		return ok, nil
	})
	tl.Mark(t, "FIRED: the webhook received %s, %s after the throttle", alertstack.FsRegressionAlert, fsFired.At.Sub(bStart).Round(time.Second))
	alertstack.CheckFSAlert(t, s, fsFired, alertstack.Target)
	s.LogEvidence(t, alertstack.Target)
	// Every node's page reaches Alertmanager (Prometheus sends them once
	// they fire), and every one is held back: by the file system alert
	// while it fires, or by its node's membership of the incident
	// (PlateauFileSystemIncident) once the page has ended with the
	// evidence while the node is still down.
	var amState string
	s.WaitFor(t, "Alertmanager to hold every node's page inhibited by "+alertstack.FsRegressionAlert+" or its node's "+alertstack.FsIncidentAlert, 3*time.Minute, func() (bool, error) {
		alerts, err := s.AmAlerts(`alertname="` + alertstack.RegressionAlert + `"`)
		if err != nil {
			return false, err
		}
		members, err := s.AmAlerts(`alertname="` + alertstack.FsIncidentAlert + `"`)
		if err != nil {
			return false, err
		}
		memberOf := map[string]string{}
		for _, m := range members {
			memberOf[m.Fingerprint] = m.Labels["instance"]
		}
		var states []string
		inhibited := map[string]bool{}
		for _, a := range alerts {
			st, by := a.Status.State, ""
			for _, fp := range a.Status.InhibitedBy {
				if fp == fsFired.Fingerprint {
					by = alertstack.FsRegressionAlert
				} else if memberOf[fp] == a.Labels["instance"] {
					by = alertstack.FsIncidentAlert
				}
			}
			if by != "" {
				st += " by " + by
			}
			states = append(states, s.AlertKey(a.Labels)+": "+st)
			if a.Status.State == "suppressed" && by != "" {
				inhibited[a.Labels["instance"]] = true
			}
		}
		sort.Strings(states)
		amState = strings.Join(states, "; ")
		return len(inhibited) == len(s.Daemons), fmt.Errorf("%s", amState)
	})
	tl.Mark(t, "Alertmanager holds every node's page suppressed: %s", amState)
	bLift := tl.Mark(t, "LIFTED the throttle of every node")
	for _, d := range s.Daemons {
		if err := d.Cgroup.ThrottleRead(fleetPlateau); err != nil {
			t.Fatal(err)
		}
		if err := d.Cgroup.ThrottleWrite(fleetPlateau); err != nil {
			t.Fatal(err)
		}
	}
	// The episode ends with the node pages resolved at Prometheus and the
	// file system alert resolved at the webhook: each node's membership
	// of the incident outlasts its recovery, so no node page leaks at the
	// end.
	s.WaitFor(t, "every page of phase (b) to resolve", 5*time.Minute, func() (bool, error) {
		if held, err := s.HeldIn(alertstack.RegressionAlert, ""); err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus still holds %d %s (%v)", len(held), alertstack.RegressionAlert, err)
		}
		if _, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
			return a.Status == "resolved" && a.Fingerprint == fsFired.Fingerprint && !a.At.Before(fsFired.At)
		}); !ok {
			return false, fmt.Errorf("no resolved notification of %s yet", alertstack.FsRegressionAlert)
		}
		return allResolved(s.Hook.Received())
	})
	tl.Mark(t, "RESOLVED: every page of phase (b), %s after the lift", time.Since(bLift).Round(time.Second))
	for _, a := range notifiedSince(s.Hook.Received(), bStart) {
		if !isFS(a) {
			s.Errorf(t, "phase (b): the webhook received %s %s at %s; the file system alert should have inhibited it", a.Status, s.AlertKey(a.Labels), s.Since(a.At))
		}
	}
	s.LogOverlaps(t, aEnd, time.Now())
}

// checkThrottleBites fails the test unless d's first run that started
// after t0 read at under half its unthrottled rate, with the accounting of
// its cgroup to say why not.
func checkThrottleBites(s *alertstack.Stack, t *testing.T, d *alertstack.Daemon, t0 time.Time, unthrottled float64, readBefore int64) {
	t.Helper()
	run := d.Runs.FirstRunStartedAfter(t, "the throttle of "+d.Host, t0, s.Opts.Interval)
	readAfter, err := d.Cgroup.ReadBytes()
	if err != nil {
		t.Fatal(err)
	}
	if run.Rate["read"] >= 0.5*unthrottled {
		s.Fatalf(t, "the throttle of %s does not bite: its first run after it read at %.0f MB/s, not under half its unthrottled %.0f MB/s (%s accounted %d MiB of reads since the throttle, so the probe's bios %s)",
			d.Host, run.Rate["read"]/1e6, unthrottled/1e6, d.Cgroup, (readAfter-readBefore)>>20,
			map[bool]string{true: "are charged to the group", false: "are NOT charged to the group"}[readAfter > readBefore])
	}
	t.Logf("%s: first throttled run of %s: %s", s.Since(run.End), d.Host, run)
}

// nodeAloneAttempts bounds the attempts of phase (a) that noise on the
// peers may spoil (nodeAlonePhase).
const nodeAloneAttempts = 3

// peerLowScore is the low score at or under which a peer of the victim
// counts as low, as PlateauFileSystemIncident counts a node of the
// incident (fleet_alerts.yml).
const peerLowScore = -1

// nodeAlonePhase throttles the victim's reads alone and checks that it,
// and it only, pages, and that its page resolves once lifted; it returns
// when the phase ended. An attempt whose checks would fail while a peer
// of the victim was itself low at an evaluation meanwhile (machine
// noise, not the throttle) is not judged: the file system page may then
// fire, rightly. It returns, with the throttle lifted, saying which peer
// and how low. A low peer while every check holds changes nothing.
func nodeAlonePhase(s *alertstack.Stack, t *testing.T, tl *alertstack.Timeline, victim *alertstack.Daemon, unthrottled float64) (time.Time, string) {
	t.Helper()
	limit := int64(alertstack.ThrottleFraction * unthrottled)
	readBefore, err := victim.Cgroup.ReadBytes()
	if err != nil {
		t.Fatal(err)
	}
	aStart := tl.Mark(t, "phase (a): THROTTLED reads of %s alone to %.0f MB/s, 40%% of its unthrottled %.0f MB/s", victim.Host, float64(limit)/1e6, unthrottled/1e6)
	if err := victim.Cgroup.ThrottleRead(limit); err != nil {
		t.Fatal(err)
	}
	lift := func() time.Time {
		at := tl.Mark(t, "LIFTED the throttle of %s", victim.Host)
		if err := victim.Cgroup.ThrottleRead(fleetPlateau); err != nil {
			t.Fatal(err)
		}
		return at
	}
	checkThrottleBites(s, t, victim, aStart, unthrottled, readBefore)
	victimRead := func(a alertstack.ReceivedAlert) bool {
		return a.Labels["alertname"] == alertstack.RegressionAlert && a.Labels["instance"] == victim.Addr && alertstack.NamesOp(a, alertstack.Probe, "read")
	}
	isFS := func(a alertstack.ReceivedAlert) bool {
		return a.Status == "firing" && a.Labels["alertname"] == alertstack.FsRegressionAlert && !a.At.Before(aStart)
	}
	var fired alertstack.ReceivedAlert
	fsPaged := false
	s.WaitFor(t, "the webhook to receive "+alertstack.RegressionAlert+" for "+victim.Host, 4*time.Minute, func() (bool, error) {
		a, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
			return a.Status == "firing" && victimRead(a) && !a.At.Before(aStart)
		})
		fired = a
		// The file system page holds the victim's back (its incident):
		// whether it was right to fire is decided below.
		_, fsPaged = s.Hook.First(isFS)
		return ok || fsPaged, nil
	})
	if fsPaged && fired.At.IsZero() {
		if disturbed := peersLow(s, t, victim, aStart); disturbed != "" {
			lift()
			return time.Time{}, disturbed
		}
		s.Fatalf(t, "phase (a): %s paged with %s alone low (every peer's low score stayed over %d), and held its page back", alertstack.FsRegressionAlert, victim.Host, peerLowScore)
	}
	tl.Mark(t, "FIRED: the webhook received %s for %s, %s after the throttle", alertstack.RegressionAlert, victim.Host, fired.At.Sub(aStart).Round(time.Second))
	alertstack.CheckFiredAlert(t, s, fired, victim)
	s.LogEvidence(t, alertstack.Target)
	aLift := lift()
	s.WaitFor(t, "the page of "+victim.Host+" to resolve", 4*time.Minute, func() (bool, error) {
		if held, err := s.HeldIn(alertstack.RegressionAlert, victim.Addr); err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus still holds %d %s for %s (%v)", len(held), alertstack.RegressionAlert, victim.Host, err)
		}
		_, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
			return a.Status == "resolved" && a.Fingerprint == fired.Fingerprint && !a.At.Before(fired.At)
		})
		return ok, fmt.Errorf("no resolved notification yet")
	})
	aEnd := tl.Mark(t, "RESOLVED: %s's page, %s after the lift", victim.Host, time.Since(aLift).Round(time.Second))
	// One node is a node problem: its peers did not page, and the file
	// system alert did not fire, at any evaluation of the phase.
	wrong := s.FiredSince(t, aStart, `ALERTS{alertname="`+alertstack.FsRegressionAlert+`"}`, "with one node throttled")
	wrong = append(wrong, s.FiredSince(t, aStart, `ALERTS{alertname="`+alertstack.RegressionAlert+`",instance!="`+victim.Addr+`"}`, "on the peers of the throttled node")...)
	// Its resolved notification is its read page whatever its
	// description says by then (alerting_integration_test.go says why).
	for _, a := range notifiedSince(s.Hook.Received(), aStart) {
		if !victimRead(a) && a.Fingerprint != fired.Fingerprint {
			wrong = append(wrong, fmt.Sprintf("the webhook received %s %s at %s; only %s's read page was expected", a.Status, s.AlertKey(a.Labels), s.Since(a.At), victim.Host))
		}
	}
	disturbed := peersLow(s, t, victim, aStart)
	if len(wrong) == 0 {
		if disturbed != "" {
			t.Logf("phase (a): every check held, though a peer was low too: %s", disturbed)
		}
		return aEnd, ""
	}
	if disturbed != "" {
		t.Logf("phase (a), not judged as a peer was low too: %s", strings.Join(wrong, "; "))
		return time.Time{}, disturbed
	}
	for _, w := range wrong {
		s.Errorf(t, "phase (a): %s", w)
	}
	return aEnd, ""
}

// peersLow names the peers of victim whose low score was at or under
// peerLowScore at an evaluation since t0, with their lowest, or "" if
// none was.
func peersLow(s *alertstack.Stack, t *testing.T, victim *alertstack.Daemon, t0 time.Time) string {
	t.Helper()
	// Evaluated past the runs so far, so that the last one counts.
	s.WaitEvaluatedPastRuns(t)
	got, err := s.Prom.Query(fmt.Sprintf(`min_over_time(plateau_probe_target_low_score{job=%q,target=%q,instance!=%q}[%ds])`,
		alertstack.Job, alertstack.Target, victim.Addr, int64(time.Since(t0).Seconds())+1))
	if err != nil {
		t.Fatal(err)
	}
	var low, all []string
	for _, g := range got {
		all = append(all, fmt.Sprintf("%s %.2f", s.HostOf(g.Metric["instance"]), g.Value))
		if g.Value <= peerLowScore {
			low = append(low, fmt.Sprintf("%s's low score fell to %.2f", s.HostOf(g.Metric["instance"]), g.Value))
		}
	}
	sort.Strings(all)
	sort.Strings(low)
	t.Logf("%s: the lowest low score of each peer of %s since %s: %s", s.Since(time.Now()), victim.Host, s.Since(t0), strings.Join(all, ", "))
	return strings.Join(low, ", ")
}

// waitFleetRecovered waits, after a disturbed attempt of phase (a), until
// no node or file-system alert is held and every notification has
// resolved, and then for two more rounds of runs: the next attempt starts
// from a calm fleet whose last runs are at their normal.
func waitFleetRecovered(s *alertstack.Stack, t *testing.T) {
	t.Helper()
	s.WaitFor(t, "the fleet to recover from a disturbed attempt", 5*time.Minute, func() (bool, error) {
		for _, name := range []string{alertstack.RegressionAlert, alertstack.FsRegressionAlert, alertstack.FsIncidentAlert, alertstack.BelowPlateauAlert} {
			if held, err := s.HeldIn(name, ""); err != nil || len(held) > 0 {
				return false, fmt.Errorf("Prometheus still holds %d %s (%v)", len(held), name, err)
			}
		}
		return allResolved(s.Hook.Received())
	})
	rounds := s.Rounds()
	s.WaitFor(t, "two more rounds of runs", 4*fleetInterval+time.Minute, func() (bool, error) {
		return s.Rounds() >= rounds+2, nil
	})
}

// notifiedSince is what the webhook received from t0 on about alerts
// that fired from t0 on: a resolved notification of an alert whose
// firing one came before t0 is the end of an earlier episode. Prometheus
// sends resolved alerts again for a quarter of an hour, and Alertmanager
// then notifies them again whenever its group's resolved set changes
// (two peers' pages of a disturbed attempt of phase (a), every second
// through the next attempt).
func notifiedSince(received []alertstack.ReceivedAlert, t0 time.Time) []alertstack.ReceivedAlert {
	firedAfter := map[string]bool{}
	var out []alertstack.ReceivedAlert
	for _, a := range received {
		if a.At.Before(t0) {
			continue
		}
		if a.Status == "firing" {
			firedAfter[a.Fingerprint] = true
		}
		if a.Status == "firing" || firedAfter[a.Fingerprint] {
			out = append(out, a)
		}
	}
	return out
}
