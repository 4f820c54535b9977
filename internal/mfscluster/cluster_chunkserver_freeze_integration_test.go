//go:build integration

package mfscluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// faultChunkServerFrozen is fault d: one chunkserver (cs-a, label A)
// stopped with SIGSTOP for several probe timeouts, then resumed.
//
// What MooseFS 3.0.117 does, measured on this cluster with throwaway
// experiments (goal 1 and trash time 0, as the probe directory has;
// cs-a frozen for 20 to 36s):
//
//   - a write whose chunk the storage class keeps on the frozen server
//     (a directory pinned to A) blocks in mfsmount: no EIO and no
//     timeout within the 38s measured, and SIGKILL does not end the
//     writer (the killed probe worker is a zombie with a thread in D in
//     request_wait_answer: mfsmount has taken the FUSE request) until
//     the SIGCONT, after which every stuck
//     writer exited within ~1.5s and the next write there took ~1.5s,
//     then its usual time;
//   - with one copy there is no other copy to serve: a file elsewhere is
//     served as usual (writes pinned to B never slowed);
//   - in an unpinned directory, the master spread new chunks evenly
//     (12 files before the freeze: 4 on each server); of 20 files created
//     one a second from the freeze on, the third (2s after it) stalled
//     8.0s and then completed with its chunk on B, and the other 19 took
//     under 10ms on B or C, never on A, although the master listed cs-a
//     as connected until ~12s after the SIGSTOP (mfscli -SCS: still
//     connected at 6s, disconnected by 12s).
//
// So an unpinned probe meets the frozen server only if its create draws
// that server's turn in the first seconds, and then stalls ~8s, past the
// 5s timeout: which node, and whether any, is the master's placement,
// not the fault's. The fault pins each client's probe directory to one
// chunkserver instead (Client.PinDir, a strict storage class): the
// victim's to A, the frozen one, its peers' to B and C. Every run of the
// victim then writes on the frozen server and every run of a peer never
// touches it, and the test can say which node must page and which must
// not. What the probe reports, truthfully:
//
//   - the victim's run blocks, is killed at the timeout, and its worker
//     does not exit: the run is counted as a timeout
//     (plateau_probe_runs_total{result="timeout"},
//     plateau_probe_errors_total{reason="timeout"}), the target is hung
//     (plateau_probe_hung 1), its next slots are skipped as target_hung,
//     and PlateauProbeHung pages for the victim, as in fault e but for
//     one node;
//   - the peers keep running and succeeding, with no timeout and no
//     error counted, and no alert of any kind;
//   - scrapes stay fast and workers bounded, as in fault e.
//
// After SIGCONT, without a restart: the worker exits, the victim's target
// is no longer hung, the next runs succeed, no probe file is left in any
// probe directory, the page resolves and its resolved notification
// arrives. The pins stay until fault a, the next, pins every directory
// to chunkserver A.
func faultChunkServerFrozen(t *testing.T, s *alertstack.Stack, c *mfscluster.Cluster, tl *alertstack.Timeline, probeDirs map[*alertstack.Daemon]string) {
	waitCalm(s, t, "fault d")
	frozenCS := c.ChunkServers[0]
	others := c.ChunkServers[1:]
	victim := s.Daemons[2]
	var peers []*alertstack.Daemon
	var peerHosts []string
	pinned := map[*alertstack.Daemon]*mfscluster.ChunkServer{}
	for i, d := range s.Daemons {
		cs := frozenCS
		if d != victim {
			cs = others[len(peers)%len(others)]
			peers = append(peers, d)
			peerHosts = append(peerHosts, d.Host)
		}
		pinned[d] = cs
		// s.daemons[i] probes through c.Clients[i] (TestClusterFaults).
		pinProbeDir(t, c.Clients[i], filepath.Join(probeDirs[d], d.Host), cs)
	}
	pinnedAt := tl.Mark(t, "fault d: PINNED the probe directory of %s to %s (label %s), its peers' to %s",
		victim.Host, frozenCS, frozenCS.Label, strings.Join(func() []string {
			var b []string
			for _, p := range peers {
				b = append(b, p.Host+" on "+pinned[p].Label)
			}
			return b
		}(), ", "))
	// A run of every daemon begun after the pin, so that the next ones
	// write where the pin says.
	for _, d := range s.Daemons {
		d.Runs.FirstRunStartedAfter(t, "the pin of "+d.Host, pinnedAt, clusterInterval)
	}
	requireSteady(s, t)

	pids := map[*alertstack.Daemon]int{}
	before := map[*alertstack.Daemon]probeCounters{}
	for _, d := range s.Daemons {
		pids[d] = d.Proc.Cmd.Process.Pid
		before[d] = readProbeCounters(t, d)
		if n := len(childProcesses(pids[d])); n > freezeWorkerBound {
			s.Fatalf(t, "%s has %d child processes before the freeze, more than the bound %d", d.Host, n, freezeWorkerBound)
		}
	}

	dStart := tl.Mark(t, "fault d: FROZE the chunkserver %s (SIGSTOP), which holds every chunk %s writes", frozenCS, victim.Host)
	if err := frozenCS.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := true
	// Registered on the fault's subtest, so it runs when the fault
	// ends, before every cleanup of the test: should the test fail while
	// the chunkserver is stopped, the daemons' stop and the unmounts must
	// not wait on it.
	t.Cleanup(func() {
		if frozen {
			if err := frozenCS.Thaw(); err != nil {
				s.Errorf(t, "thawing %s in cleanup: %v", frozenCS, err)
			}
		}
	})
	sampler := startFreezeSampler(s.Daemons, pids)
	defer sampler.stop()

	// The victim's target hung, as it exports it; no peer's.
	var hungAt time.Time
	s.WaitFor(t, victim.Host+" to export plateau_probe_hung 1", 2*time.Minute, func() (bool, error) {
		for _, d := range s.Daemons {
			fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
			if err != nil {
				return false, err
			}
			v, _ := probetest.FamilyValue(fams, "plateau_probe_hung", map[string]string{"target": alertstack.Target})
			if d != victim {
				if v != 0 {
					s.Fatalf(t, "%s, whose probe directory is on %s, exports plateau_probe_hung %g with only %s frozen", d.Host, pinned[d], v, frozenCS)
				}
				continue
			}
			if v == 1 {
				hungAt = time.Now()
			}
		}
		return !hungAt.IsZero(), fmt.Errorf("%s not hung yet; %v", victim.Host, failedRuns(s))
	})
	tl.Add(t, hungAt, fmt.Sprintf("%s exports plateau_probe_hung 1 (%s after the freeze)", victim.Host, hungAt.Sub(dStart).Round(100*time.Millisecond)))

	// The page, for the victim.
	var fired alertstack.ReceivedAlert
	s.WaitFor(t, "the webhook to receive "+hungAlert+" for "+victim.Host, 2*time.Minute, func() (bool, error) {
		a, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
			return a.Status == "firing" && a.Labels["alertname"] == hungAlert && a.Labels["instance"] == victim.Addr && !a.At.Before(dStart)
		})
		fired = a
		return ok, fmt.Errorf("no %s notified yet for %s", hungAlert, victim.Host)
	})
	if fired.Labels["target"] != alertstack.Target || fired.Labels["severity"] != "critical" {
		s.Errorf(t, "%s of %s notified with labels %v, want target %s and severity critical", hungAlert, victim.Host, fired.Labels, alertstack.Target)
	}
	desc := strings.Join(strings.Fields(fired.Annotations["description"]), " ")
	for _, want := range []string{"target " + alertstack.Target + " of " + victim.Addr, "did not exit after SIGKILL"} {
		if !strings.Contains(desc, want) {
			s.Errorf(t, "%s of %s: the description does not say %q: %s", hungAlert, victim.Host, want, desc)
		}
	}
	tl.Mark(t, "FIRED: the webhook received %s for %s, %s after the freeze", hungAlert, victim.Host, fired.At.Sub(dStart).Round(time.Second))
	checkStatusPageHung(t, victim, dStart, hungAt)

	// While the victim's slots are refused as target_hung, every peer
	// keeps running: runs begun after the freeze that succeed.
	s.WaitFor(t, fmt.Sprintf("%s to skip %d slots as target_hung and every peer to succeed %d runs begun after the freeze", victim.Host, freezeSkippedSlots, freezeSkippedSlots),
		3*clusterInterval*freezeSkippedSlots+time.Minute, func() (bool, error) {
			var short []string
			fams, _, err := alertstack.ScrapeFamilies(victim.URL + "/metrics")
			if err != nil {
				return false, err
			}
			if v, _ := probetest.FamilyValue(fams, "plateau_probe_skips_total", map[string]string{"target": alertstack.Target, "reason": "target_hung"}); v-before[victim].skipsHung < freezeSkippedSlots {
				short = append(short, fmt.Sprintf("%s skipped %.0f", victim.Host, v-before[victim].skipsHung))
			}
			for _, p := range peers {
				if n := len(runsBegunAfter(p, dStart)); n < freezeSkippedSlots {
					short = append(short, fmt.Sprintf("%s ran %d", p.Host, n))
				}
			}
			return len(short) == 0, fmt.Errorf("so far: %s; %v", strings.Join(short, ", "), failedRuns(s))
		})

	dThaw := tl.Mark(t, "THAWED the chunkserver %s (SIGCONT), %s after the freeze", frozenCS, time.Since(dStart).Round(time.Second))
	if err := frozenCS.Thaw(); err != nil {
		t.Fatal(err)
	}
	frozen = false
	sampler.stop()
	sampler.check(t, s, "fault d", dStart, dThaw)
	checkPrometheusScrapedThrough(t, s, "fault d", dStart, dThaw)
	for _, p := range peers {
		runs := runsBegunAfter(p, dStart)
		var during []string
		for _, r := range runs {
			if r.End.Before(dThaw) {
				during = append(during, fmt.Sprintf("%.2fs", r.Seconds))
			}
		}
		t.Logf("fault d: %s (on %s) ran and succeeded %d times during the freeze: %s", p.Host, pinned[p].Label, len(during), strings.Join(during, ", "))
	}

	// Recovery without a restart: the victim's worker exits, its target
	// is no longer hung, and a run begun after the thaw succeeds.
	var clearedAt time.Time
	var okRun alertstack.Run
	s.WaitFor(t, victim.Host+"'s target to recover and a run begun after the thaw to succeed", 3*time.Minute, func() (bool, error) {
		for _, d := range s.Daemons {
			if d.Proc.Exited() || d.Proc.Cmd.Process.Pid != pids[d] {
				s.Fatalf(t, "%s exited during fault d; its log:\n%s", d.Host, alertstack.TailFile(d.Proc.Log, 40))
			}
		}
		if clearedAt.IsZero() {
			fams, _, err := alertstack.ScrapeFamilies(victim.URL + "/metrics")
			if err != nil {
				return false, err
			}
			if v, ok := probetest.FamilyValue(fams, "plateau_probe_hung", map[string]string{"target": alertstack.Target}); ok && v == 0 {
				clearedAt = time.Now()
			}
		}
		if runs := runsBegunAfter(victim, dThaw); len(runs) > 0 {
			okRun = runs[0]
		}
		return !clearedAt.IsZero() && !okRun.End.IsZero(), fmt.Errorf("hung cleared %v, run %v; %v", !clearedAt.IsZero(), !okRun.End.IsZero(), failedRuns(s))
	})
	tl.Add(t, okRun.End, fmt.Sprintf("%s recovered: hung cleared %s after the thaw, first run begun after it ended %s after it: %s",
		victim.Host, clearedAt.Sub(dThaw).Round(100*time.Millisecond), okRun.End.Sub(dThaw).Round(100*time.Millisecond), okRun))
	// Every peer too has run since the thaw, so that the probe
	// directories are checked with every daemon past the fault.
	for _, p := range peers {
		p.Runs.FirstRunStartedAfter(t, "the thaw, on "+p.Host, dThaw, clusterInterval)
	}
	checkProbeDirsClean(t, s, probeDirs)

	// What was counted: the victim's timeout, nothing on the peers.
	for _, d := range s.Daemons {
		after := readProbeCounters(t, d)
		dTimeout := after.runsTimeout - before[d].runsTimeout
		dErrTimeout := after.errors["timeout"] - before[d].errors["timeout"]
		var errs []string
		for reason, v := range after.errors {
			if n := v - before[d].errors[reason]; n > 0 {
				errs = append(errs, fmt.Sprintf("%s %.0f", reason, n))
			}
		}
		slices.Sort(errs)
		t.Logf("fault d: %s (on %s) counted %.0f timeout runs, %.0f failed runs, %.0f successful runs, %.0f target_hung skips; errors by reason: %v",
			d.Host, pinned[d].Label, dTimeout, after.runsFailure-before[d].runsFailure, after.runsSuccess-before[d].runsSuccess, after.skipsHung-before[d].skipsHung, errs)
		if d == victim {
			if dTimeout < 1 || dErrTimeout < 1 {
				s.Errorf(t, "fault d: %s, whose run met the frozen %s, counted %.0f timeout runs and %.0f timeout errors, want at least 1 of each", d.Host, frozenCS, dTimeout, dErrTimeout)
			}
			continue
		}
		if dTimeout != 0 || after.runsFailure != before[d].runsFailure || len(errs) > 0 {
			s.Errorf(t, "fault d: %s, whose probe directory is on %s, counted %.0f timeout and %.0f failed runs and errors %v with only %s frozen, want none",
				d.Host, pinned[d], dTimeout, after.runsFailure-before[d].runsFailure, errs, frozenCS)
		}
	}

	// The page resolves, in Prometheus, in Alertmanager and at the
	// webhook.
	waitHangResolved(t, s, "d", dThaw, map[*alertstack.Daemon]alertstack.ReceivedAlert{victim: fired})
	dEnd := tl.Mark(t, "RESOLVED: every alert of fault d, %s after the thaw", time.Since(dThaw).Round(time.Second))

	// PlateauProbeHung on the victim only, nothing on its peers, and
	// nothing that the hang does not explain.
	got, err := s.Prom.CountOverRange(`ALERTS{alertname="`+hungAlert+`",alertstate="firing"}`, dStart)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Metric["instance"] != victim.Addr {
		var on []string
		for _, g := range got {
			on = append(on, s.HostOf(g.Metric["instance"]))
		}
		s.Errorf(t, "fault d: %s fired in Prometheus for %v, want %s only", hungAlert, on, victim.Host)
	}
	checkNoAlert(s, t, dStart, `ALERTS{instance!="`+victim.Addr+`"}`, "on the peers of the node whose chunkserver is frozen ("+strings.Join(peerHosts, ", ")+")")
	checkNoAlert(s, t, dStart, `ALERTS{alertname!~"`+hungAlert+`|`+failingAlert+`|`+notRunAlert+`"}`, "with a chunkserver frozen")
	checkFreezeNotifications(t, s, "fault d", dStart, []string{victim.Host})

	iv := clusterInterval.Seconds()
	t.Logf("fault d in probe intervals (%s): %s hung exported after %.1f; %s notified after %.1f; frozen for %.1f; first successful run after the thaw ended after %.1f; the whole fault took %s from the freeze (%s from the pin)",
		clusterInterval, victim.Host, hungAt.Sub(dStart).Seconds()/iv, hungAlert, fired.At.Sub(dStart).Seconds()/iv, dThaw.Sub(dStart).Seconds()/iv,
		okRun.End.Sub(dThaw).Seconds()/iv, dEnd.Sub(dStart).Round(time.Second), dEnd.Sub(pinnedAt).Round(time.Second))
}

// pinProbeDir pins dir (a probe target's directory, where its runs make
// their run directories) to chunkserver cs, and checks it: a file written
// there through cl has every chunk on cs only.
func pinProbeDir(t *testing.T, cl *mfscluster.Client, dir string, cs *mfscluster.ChunkServer) {
	t.Helper()
	if err := cl.PinDir(dir, cs.Label); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "pin-check")
	if err := writeFileSynced(f, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	chunks, err := cl.Chunks(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if len(chunks) == 0 {
		t.Fatalf("mfsfileinfo lists no chunk for %s", f)
	}
	for _, ch := range chunks {
		if !slices.Equal(ch.Servers, []string{cs.Addr}) {
			t.Fatalf("%s pinned to %s (label %s), but a file written there has chunk %d on %v", dir, cs, cs.Label, ch.Index, ch.Servers)
		}
	}
}

func writeFileSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runsBegunAfter are the daemon's successful runs begun after t0.
func runsBegunAfter(d *alertstack.Daemon, t0 time.Time) []alertstack.Run {
	runs, _ := d.Runs.Snapshot()
	var out []alertstack.Run
	for _, r := range runs {
		if r.Start().After(t0) {
			out = append(out, r)
		}
	}
	return out
}

// probeCounters are a daemon's counters of the stack's target.
type probeCounters struct {
	runsSuccess, runsFailure, runsTimeout float64
	skipsHung                             float64
	// errors by reason
	errors map[string]float64
}

func readProbeCounters(t *testing.T, d *alertstack.Daemon) probeCounters {
	t.Helper()
	fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	tg := map[string]string{"target": alertstack.Target}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range tg {
			m[a] = b
		}
		return m
	}
	var pc probeCounters
	pc.runsSuccess, _ = probetest.FamilyValue(fams, "plateau_probe_runs_total", with("result", "success"))
	pc.runsFailure, _ = probetest.FamilyValue(fams, "plateau_probe_runs_total", with("result", "failure"))
	pc.runsTimeout, _ = probetest.FamilyValue(fams, "plateau_probe_runs_total", with("result", "timeout"))
	pc.skipsHung, _ = probetest.FamilyValue(fams, "plateau_probe_skips_total", with("reason", "target_hung"))
	pc.errors = map[string]float64{}
	if f := fams["plateau_probe_errors_total"]; f != nil {
		for _, m := range f.GetMetric() {
			if labelOf(m, "target") == alertstack.Target {
				pc.errors[labelOf(m, "reason")] += m.GetCounter().GetValue()
			}
		}
	}
	return pc
}

func labelOf(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}
