//go:build integration

package dashboards

import (
	"fmt"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
)

// faultClientLink is fault b of TestClusterFaults: the link of one
// client, victim on vc, throttled to clusterFaultFraction of its calm
// read rate (medianRead) pages that node alone (PlateauProbeRegression
// naming its instance), with no PlateauFileSystemRegression and nothing
// on its peers, and the page resolves once the throttle is lifted.
func faultClientLink(t *testing.T, s *alertStack, tl *timeline, victim *stackDaemon, vc *mfscluster.Client, medianRead map[*stackDaemon]float64) {
	t.Helper()
	// From calm: fault c's last alert may have resolved in the
	// evaluation just before.
	s.waitCalm(t, "fault b")
	limit := int64(clusterFaultFraction * medianRead[victim])
	bStart := tl.mark(t, "fault b: THROTTLED the link of %s (%s) to %.1f MB/s, 30%% of its calm read %.1f MB/s", victim.host, vc, float64(limit)/1e6, medianRead[victim]/1e6)
	if err := vc.ThrottleNetwork(limit); err != nil {
		t.Fatal(err)
	}
	// The bite is judged on a run that started once the throttle was in
	// place, not on one that met it halfway.
	run := victim.runs.firstRunStartedAfter(t, "the throttle of "+victim.host, time.Now(), clusterInterval)
	if run.Rate["read"] >= 0.5*medianRead[victim] {
		t.Fatalf("the link throttle of %s does not bite: its first run after it read at %.1f MB/s, not under half its calm %.1f MB/s", victim.host, run.Rate["read"]/1e6, medianRead[victim]/1e6)
	}
	t.Logf("%s: first throttled run of %s: %s", s.since(run.End), victim.host, run)
	isVictimPage := func(a receivedAlert) bool {
		return a.Labels["alertname"] == regressionAlert && a.Labels["instance"] == victim.addr
	}
	var fired receivedAlert
	waitFor(t, "the webhook to receive "+regressionAlert+" for "+victim.host, 3*time.Minute, func() (bool, error) {
		a, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "firing" && isVictimPage(a) && !a.At.Before(bStart) })
		fired = a
		return ok, s.failedRuns()
	})
	tl.mark(t, "FIRED: the webhook received %s for %s, %s after the throttle", regressionAlert, victim.host, fired.At.Sub(bStart).Round(time.Second))
	checkFiredAlert(t, s, fired, victim)
	bLift := tl.mark(t, "LIFTED the throttle of %s (back to the %.0f MB/s link)", victim.host, clusterLink/1e6)
	if err := vc.ThrottleNetwork(clusterLink); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the page of "+victim.host+" to resolve", 3*time.Minute, func() (bool, error) {
		if held, err := s.heldIn(regressionAlert, victim.addr); err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus still holds %d %s for %s (%v)", len(held), regressionAlert, victim.host, err)
		}
		_, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "resolved" && a.Fingerprint == fired.Fingerprint })
		return ok, fmt.Errorf("no resolved notification yet")
	})
	tl.mark(t, "RESOLVED: %s's page, %s after the lift", victim.host, time.Since(bLift).Round(time.Second))
	// One client's link is a node problem: no file-system page, no page
	// of its peers, no other alert of any kind, at any evaluation.
	s.checkNoAlert(t, bStart, `ALERTS{alertname="`+fsRegressionAlert+`"}`, "with one client's link throttled")
	s.checkNoAlert(t, bStart, `ALERTS{alertname!="`+regressionAlert+`"}`, "with one client's link throttled")
	s.checkNoAlert(t, bStart, `ALERTS{instance!="`+victim.addr+`"}`, "on the peers of the throttled client")
	s.checkNotifiedOnly(t, "b", bStart, isVictimPage, victim.host+"'s page")
	s.logOverlaps(t, bStart, time.Now())
}
