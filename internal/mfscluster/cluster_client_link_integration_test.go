//go:build integration

package mfscluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
)

// faultClientLink is fault b of TestClusterFaults: the link of one
// client, victim on vc, throttled to clusterFaultFraction of its calm
// read rate (medianRead) pages that node alone (PlateauProbeRegression
// naming its instance), with no PlateauFileSystemRegression and nothing
// on its peers, and the page resolves once the throttle is lifted.
func faultClientLink(t *testing.T, s *alertstack.Stack, tl *alertstack.Timeline, victim *alertstack.Daemon, vc *mfscluster.Client, medianRead map[*alertstack.Daemon]float64) {
	t.Helper()
	// From calm: fault c's last alert may have resolved in the
	// evaluation just before.
	waitCalm(s, t, "fault b")
	limit := int64(clusterFaultFraction * medianRead[victim])
	bStart := tl.Mark(t, "fault b: THROTTLED the link of %s (%s) to %.1f MB/s, 30%% of its calm read %.1f MB/s", victim.Host, vc, float64(limit)/1e6, medianRead[victim]/1e6)
	if err := vc.ThrottleNetwork(limit); err != nil {
		t.Fatal(err)
	}
	// The bite is judged on a run that started once the throttle was in
	// place, not on one that met it halfway.
	run := victim.Runs.FirstRunStartedAfter(t, "the throttle of "+victim.Host, time.Now(), clusterInterval)
	if run.Rate["read"] >= 0.5*medianRead[victim] {
		s.Fatalf(t, "the link throttle of %s does not bite: its first run after it read at %.1f MB/s, not under half its calm %.1f MB/s", victim.Host, run.Rate["read"]/1e6, medianRead[victim]/1e6)
	}
	t.Logf("%s: first throttled run of %s: %s", s.Since(run.End), victim.Host, run)
	isVictimPage := func(a alertstack.ReceivedAlert) bool {
		return a.Labels["alertname"] == alertstack.RegressionAlert && a.Labels["instance"] == victim.Addr
	}
	var fired alertstack.ReceivedAlert
	s.WaitFor(t, "the webhook to receive "+alertstack.RegressionAlert+" for "+victim.Host, 3*time.Minute, func() (bool, error) {
		a, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
			return a.Status == "firing" && isVictimPage(a) && !a.At.Before(bStart)
		})
		fired = a
		return ok, failedRuns(s)
	})
	tl.Mark(t, "FIRED: the webhook received %s for %s, %s after the throttle", alertstack.RegressionAlert, victim.Host, fired.At.Sub(bStart).Round(time.Second))
	alertstack.CheckFiredAlert(t, s, fired, victim)
	bLift := tl.Mark(t, "LIFTED the throttle of %s (back to the %.0f MB/s link)", victim.Host, clusterLink/1e6)
	if err := vc.ThrottleNetwork(clusterLink); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, "the page of "+victim.Host+" to resolve", 3*time.Minute, func() (bool, error) {
		if held, err := s.HeldIn(alertstack.RegressionAlert, victim.Addr); err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus still holds %d %s for %s (%v)", len(held), alertstack.RegressionAlert, victim.Host, err)
		}
		_, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
			return a.Status == "resolved" && a.Fingerprint == fired.Fingerprint
		})
		return ok, fmt.Errorf("no resolved notification yet")
	})
	tl.Mark(t, "RESOLVED: %s's page, %s after the lift", victim.Host, time.Since(bLift).Round(time.Second))
	// One client's link is a node problem: no file-system page, no page
	// of its peers, no other alert of any kind, at any evaluation.
	checkNoAlert(s, t, bStart, `ALERTS{alertname="`+alertstack.FsRegressionAlert+`"}`, "with one client's link throttled")
	checkNoAlert(s, t, bStart, `ALERTS{alertname!="`+alertstack.RegressionAlert+`"}`, "with one client's link throttled")
	checkNoAlert(s, t, bStart, `ALERTS{instance!="`+victim.Addr+`"}`, "on the peers of the throttled client")
	checkNotifiedOnly(s, t, "b", bStart, isVictimPage, victim.Host+"'s page")
	s.LogOverlaps(t, bStart, time.Now())
}
