//go:build integration

package mfscluster_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/statuspage"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

const (
	hungAlert    = "PlateauProbeHung"
	failingAlert = "PlateauProbeFailing"
	notRunAlert  = "PlateauProbeNotRun"

	// freezeWorkerBound is how many probe workers a daemon of the cluster
	// may have at once: it has one target of one probe, the scheduler
	// runs one probe at a time per target, and it starts none on a target
	// whose killed worker has not exited (a hung target).
	freezeWorkerBound = 1

	// freezeScrapeBound is what a scrape of a daemon may take while every
	// mount hangs: a scrape reads a snapshot and never touches the file
	// system, so it answers in milliseconds; the bound is generous
	// because this two-core machine is shared and noisy, and the real
	// figures are logged.
	freezeScrapeBound = 2 * time.Second

	// freezeSkippedSlots is how many slots of every daemon must be
	// refused as target_hung before the master is thawed, so that the
	// worker bound is measured while the scheduler keeps trying.
	freezeSkippedSlots = 2
)

// faultMasterFrozen is fault e: the metadata server (mfsmaster) stopped
// with SIGSTOP. Every mount hangs: each daemon's running probe blocks in
// the kernel on its mount, is killed at its timeout, does not exit
// (a FUSE request mfsmount has taken waits for its answer whatever the
// signal), and its target is marked hung. It asserts, with the master
// frozen:
//
//   - every daemon exports plateau_probe_hung 1 for the target;
//   - every scrape of every daemon's /metrics answers under
//     freezeScrapeBound (measured by the test over HTTP, and Prometheus
//     keeps scraping: up stays 1);
//   - no daemon has more than freezeWorkerBound worker processes
//     (counted in /proc), while its slots come and are skipped as
//     target_hung;
//   - the status page and /status.json name the hung target and say
//     since when (a time after the freeze, before it was seen);
//   - PlateauProbeHung fires for every node, and the webhook is notified
//     of it for every node.
//
// After SIGCONT, without restarting any daemon: the workers exit, the
// targets are no longer hung, the next runs succeed, no file of a probe
// run is left in any probe directory, every alert resolves and the
// webhook gets the resolved notifications. Over the whole fault no alert
// fires in Prometheus other than PlateauProbeHung and the two it
// inhibits in alertmanager.yml (PlateauProbeFailing and
// PlateauProbeNotRun, of the same node and target), and the webhook gets
// nothing but PlateauProbeHung, and the two warnings where the shipped
// inhibition lets them through (see checkFreezeNotifications).
func faultMasterFrozen(t *testing.T, s *alertstack.Stack, c *mfscluster.Cluster, tl *alertstack.Timeline, probeDirs map[*alertstack.Daemon]string) {
	waitCalm(s, t, "fault e")
	pids := map[*alertstack.Daemon]int{}
	skipsBefore := map[*alertstack.Daemon]float64{}
	for _, d := range s.Daemons {
		pids[d] = d.Proc.Cmd.Process.Pid
		fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		skipsBefore[d], _ = probetest.FamilyValue(fams, "plateau_probe_skips_total", map[string]string{"target": alertstack.Target, "reason": "target_hung"})
		if n := len(childProcesses(pids[d])); n > freezeWorkerBound {
			s.Fatalf(t, "%s has %d child processes before the freeze, more than the bound %d", d.Host, n, freezeWorkerBound)
		}
	}

	eStart := tl.Mark(t, "fault e: FROZE the master %s (SIGSTOP)", c.Master)
	if err := c.Master.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := true
	// Registered on the fault's subtest, so it runs when the fault
	// ends, before every cleanup of the test: should the test fail while
	// the master is stopped, the daemons' stop, logSpace's mfscli and the
	// unmounts must not wait on it (the cluster's own teardown thaws it
	// too, but last).
	t.Cleanup(func() {
		if frozen {
			if err := c.Master.Thaw(); err != nil {
				s.Errorf(t, "thawing the master in cleanup: %v", err)
			}
		}
	})
	sampler := startFreezeSampler(s.Daemons, pids)
	defer sampler.stop()

	// Every daemon's target hung, as it exports it.
	hungAt := map[*alertstack.Daemon]time.Time{}
	s.WaitFor(t, "every daemon to export plateau_probe_hung 1", 2*time.Minute, func() (bool, error) {
		var missing []string
		for _, d := range s.Daemons {
			if _, ok := hungAt[d]; ok {
				continue
			}
			fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
			if err != nil {
				return false, err
			}
			if v, _ := probetest.FamilyValue(fams, "plateau_probe_hung", map[string]string{"target": alertstack.Target}); v == 1 {
				hungAt[d] = time.Now()
				tl.Add(t, hungAt[d], fmt.Sprintf("%s exports plateau_probe_hung 1 (%s after the freeze)", d.Host, hungAt[d].Sub(eStart).Round(100*time.Millisecond)))
				continue
			}
			missing = append(missing, d.Host)
		}
		return len(missing) == 0, fmt.Errorf("not hung yet: %s", strings.Join(missing, ", "))
	})

	// The page, for every node.
	firedAt := map[*alertstack.Daemon]alertstack.ReceivedAlert{}
	s.WaitFor(t, "the webhook to receive "+hungAlert+" for every node", 2*time.Minute, func() (bool, error) {
		var missing []string
		for _, d := range s.Daemons {
			if _, ok := firedAt[d]; ok {
				continue
			}
			a, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
				return a.Status == "firing" && a.Labels["alertname"] == hungAlert && a.Labels["instance"] == d.Addr && !a.At.Before(eStart)
			})
			if !ok {
				missing = append(missing, d.Host)
				continue
			}
			firedAt[d] = a
		}
		return len(missing) == 0, fmt.Errorf("no %s notified yet for %s", hungAlert, strings.Join(missing, ", "))
	})
	last := time.Time{}
	for _, d := range s.Daemons {
		a := firedAt[d]
		if a.At.After(last) {
			last = a.At
		}
		if a.Labels["target"] != alertstack.Target || a.Labels["severity"] != "critical" {
			s.Errorf(t, "%s of %s notified with labels %v, want target %s and severity critical", hungAlert, d.Host, a.Labels, alertstack.Target)
		}
		desc := strings.Join(strings.Fields(a.Annotations["description"]), " ")
		for _, want := range []string{"target " + alertstack.Target + " of " + d.Addr, "did not exit after SIGKILL", "the mount itself is likely hung"} {
			if !strings.Contains(desc, want) {
				s.Errorf(t, "%s of %s: the description does not say %q: %s", hungAlert, d.Host, want, desc)
			}
		}
	}
	tl.Mark(t, "FIRED: the webhook received %s for all %d nodes, the last %s after the freeze", hungAlert, len(s.Daemons), last.Sub(eStart).Round(time.Second))

	// The status page names the hung target and since when.
	for _, d := range s.Daemons {
		checkStatusPageHung(t, d, eStart, hungAt[d])
	}

	// Slots keep coming while the target is hung; each is refused, and
	// no worker starts. Waited for so that the bound below is measured
	// against the scheduler's tries, not only one stuck run.
	s.WaitFor(t, fmt.Sprintf("every daemon to skip %d slots as target_hung", freezeSkippedSlots), 3*clusterInterval*freezeSkippedSlots+time.Minute, func() (bool, error) {
		var short []string
		for _, d := range s.Daemons {
			fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
			if err != nil {
				return false, err
			}
			v, _ := probetest.FamilyValue(fams, "plateau_probe_skips_total", map[string]string{"target": alertstack.Target, "reason": "target_hung"})
			if v-skipsBefore[d] < freezeSkippedSlots {
				short = append(short, fmt.Sprintf("%s %.0f", d.Host, v-skipsBefore[d]))
			}
		}
		return len(short) == 0, fmt.Errorf("target_hung skips so far: %s", strings.Join(short, ", "))
	})

	eThaw := tl.Mark(t, "THAWED the master %s (SIGCONT), %s after the freeze", c.Master, time.Since(eStart).Round(time.Second))
	if err := c.Master.Thaw(); err != nil {
		t.Fatal(err)
	}
	frozen = false
	sampler.stop()
	sampler.check(t, s, "fault e", eStart, eThaw)
	checkPrometheusScrapedThrough(t, s, "fault e", eStart, eThaw)

	// Recovery without a restart: the worker exits, the target is no
	// longer hung, the next run succeeds.
	clearedAt, okRun := map[*alertstack.Daemon]time.Time{}, map[*alertstack.Daemon]alertstack.Run{}
	s.WaitFor(t, "every daemon's target to recover and a run begun after the thaw to succeed", 3*time.Minute, func() (bool, error) {
		var waiting []string
		for _, d := range s.Daemons {
			if d.Proc.Exited() || d.Proc.Cmd.Process.Pid != pids[d] {
				s.Fatalf(t, "%s exited during fault e; its log:\n%s", d.Host, alertstack.TailFile(d.Proc.Log, 40))
			}
			if _, ok := clearedAt[d]; !ok {
				fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
				if err != nil {
					return false, err
				}
				if v, ok := probetest.FamilyValue(fams, "plateau_probe_hung", map[string]string{"target": alertstack.Target}); ok && v == 0 {
					clearedAt[d] = time.Now()
				}
			}
			if _, ok := okRun[d]; !ok {
				runs, _ := d.Runs.Snapshot()
				for _, r := range runs {
					if r.Start().After(eThaw) {
						okRun[d] = r
						break
					}
				}
			}
			_, cleared := clearedAt[d]
			_, ran := okRun[d]
			if !cleared || !ran {
				waiting = append(waiting, fmt.Sprintf("%s (hung cleared %v, run %v)", d.Host, cleared, ran))
			}
		}
		return len(waiting) == 0, fmt.Errorf("waiting for %s; %v", strings.Join(waiting, ", "), failedRuns(s))
	})
	for _, d := range s.Daemons {
		r := okRun[d]
		tl.Add(t, r.End, fmt.Sprintf("%s recovered: hung cleared %s after the thaw, first run begun after it ended %s after it: %s",
			d.Host, clearedAt[d].Sub(eThaw).Round(100*time.Millisecond), r.End.Sub(eThaw).Round(100*time.Millisecond), r))
	}
	checkProbeDirsClean(t, s, probeDirs)

	// Every alert resolves, in Prometheus, in Alertmanager and at the
	// webhook.
	waitHangResolved(t, s, "e", eThaw, firedAt)
	eEnd := tl.Mark(t, "RESOLVED: every alert of fault e, %s after the thaw", time.Since(eThaw).Round(time.Second))

	// Exactly PlateauProbeHung on every node, and nothing that the hang
	// does not explain.
	fired, err := s.Prom.CountOverRange(`ALERTS{alertname="`+hungAlert+`",alertstate="firing"}`, eStart)
	if err != nil {
		t.Fatal(err)
	}
	var hungNodes []string
	for _, f := range fired {
		hungNodes = append(hungNodes, s.HostOf(f.Metric["instance"]))
	}
	if len(hungNodes) != len(s.Daemons) {
		s.Errorf(t, "%s fired in Prometheus for %v, want every one of the %d nodes", hungAlert, hungNodes, len(s.Daemons))
	}
	checkNoAlert(s, t, eStart, `ALERTS{alertname!~"`+hungAlert+`|`+failingAlert+`|`+notRunAlert+`"}`, "with the master frozen")
	checkFreezeNotifications(t, s, "fault e", eStart, hungNodes)

	var detect, notify, recover []string
	for _, d := range s.Daemons {
		detect = append(detect, fmt.Sprintf("%s %.1f", d.Host, hungAt[d].Sub(eStart).Seconds()/clusterInterval.Seconds()))
		notify = append(notify, fmt.Sprintf("%s %.1f", d.Host, firedAt[d].At.Sub(eStart).Seconds()/clusterInterval.Seconds()))
		recover = append(recover, fmt.Sprintf("%s %.1f", d.Host, okRun[d].End.Sub(eThaw).Seconds()/clusterInterval.Seconds()))
	}
	t.Logf("fault e in probe intervals (%s): hung exported after %s; %s notified after %s; first successful run after the thaw ended after %s; the whole fault took %s",
		clusterInterval, strings.Join(detect, ", "), hungAlert, strings.Join(notify, ", "), strings.Join(recover, ", "), eEnd.Sub(eStart).Round(time.Second))
}

// waitCalm waits until Prometheus holds no alert and has recorded none in
// the last 5s, and Alertmanager holds none, then requires the steady
// state: so that the checks over the fault's range (whole seconds,
// rounded up) do not see the last evaluations of the previous fault's
// alerts, which may have resolved a moment ago.
func waitCalm(s *alertstack.Stack, t *testing.T, fault string) {
	t.Helper()
	s.WaitFor(t, "no alert held or recorded in the last 5s before "+fault, time.Minute, func() (bool, error) {
		held, err := s.Prom.Alerts()
		if err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus holds %d alerts (%v)", len(held), err)
		}
		recent, err := s.Prom.Query(`count_over_time(ALERTS[5s])`)
		if err != nil || len(recent) > 0 {
			return false, fmt.Errorf("Prometheus recorded %d alerts in the last 5s (%v)", len(recent), err)
		}
		am, err := s.AmAlerts("")
		if err != nil || len(am) > 0 {
			return false, fmt.Errorf("Alertmanager holds %d alerts (%v)", len(am), err)
		}
		return true, nil
	})
	requireSteady(s, t)
}

// checkFreezeNotifications fails the test if the webhook received, since
// the fault (e, or d: see faultChunkServerFrozen) began, anything but
// PlateauProbeHung, and, logged and counted rather than failed,
// PlateauProbeFailing or PlateauProbeNotRun of the stack's target on a
// node whose hung page fired; it logs on which nodes those two fired in
// Prometheus at all. alertmanager.yml has PlateauProbeHung inhibit them,
// and alerts.yml holds them back while the target is hung and for 30m
// after (max_over_time of plateau_probe_hung), since the inhibition alone
// let them through in two ways, seen here before that hold:
//
//   - the failing condition begins with the same run as the hang (the
//     timed-out run is recorded just before its worker is counted as
//     abandoned) and both alerts have the same `for`, so both fire at the
//     same evaluation, and Alertmanager may flush the warning's group
//     before the page that inhibits it is in (seen for one node of four);
//   - after the thaw, PlateauProbeHung's condition ends when the worker
//     exits, the failing condition only at the next successful run, up to
//     an interval later, and both keep firing for as long: the warning
//     outlived its inhibitor and was notified.
//
// They are still only counted: in this test's compressed time (a 5s
// timeout in a 6s interval) the failing condition can begin a moment
// before the daemon exports the hang, which production's intervals (a
// 2m timeout in 15m) do not allow.
func checkFreezeNotifications(t *testing.T, s *alertstack.Stack, fault string, eStart time.Time, hungNodes []string) {
	t.Helper()
	for _, name := range []string{failingAlert, notRunAlert} {
		got, err := s.Prom.CountOverRange(`ALERTS{alertname="`+name+`",alertstate="firing"}`, eStart)
		if err != nil {
			t.Fatal(err)
		}
		var on []string
		for _, g := range got {
			on = append(on, fmt.Sprintf("%s (%g evaluations)", s.HostOf(g.Metric["instance"]), g.Value))
		}
		t.Logf("%s: %s fired in Prometheus on %d nodes, for Alertmanager to inhibit: %s", fault, name, len(got), strings.Join(on, ", "))
	}
	gap := map[string]int{}
	for _, a := range s.Hook.Received() {
		if a.At.Before(eStart) || a.Labels["alertname"] == hungAlert {
			continue
		}
		name := a.Labels["alertname"]
		if (name == failingAlert || name == notRunAlert) && a.Labels["target"] == alertstack.Target && slices.Contains(hungNodes, s.HostOf(a.Labels["instance"])) {
			gap[name+" "+a.Status]++
			t.Logf("%s: GAP: the webhook received %s %s at %s, which %s should have inhibited",
				fault, a.Status, s.AlertKey(a.Labels), s.Since(a.At), hungAlert)
			continue
		}
		s.Errorf(t, "%s: the webhook received %s %s at %s; only %s was expected", fault, a.Status, s.AlertKey(a.Labels), s.Since(a.At), hungAlert)
	}
	t.Logf("%s: notifications that %s did not hold back (see checkFreezeNotifications): %v", fault, hungAlert, gap)
}

// checkStatusPageHung asserts that the daemon's /status.json and status
// page say the stack's target is hung, with a start between the freeze
// and when the test first saw plateau_probe_hung.
func checkStatusPageHung(t *testing.T, d *alertstack.Daemon, frozeAt, seenAt time.Time) {
	t.Helper()
	start := time.Now()
	body, err := alertstack.HTTPGet(d.URL + "/status.json")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s: %v", d.Host, err)
	}
	var st statuspage.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%s /status.json: %v", d.Host, err)
	}
	var tg *statuspage.TargetStatus
	for i := range st.Targets {
		if st.Targets[i].Name == alertstack.Target {
			tg = &st.Targets[i]
		}
	}
	switch {
	case tg == nil:
		t.Fatalf("%s /status.json has no target %s: %s", d.Host, alertstack.Target, body)
	case !tg.Hung || tg.AbandonedWorkers < 1 || tg.HungSince == nil:
		t.Errorf("%s /status.json: target %s hung %v since %v with %d abandoned workers, want hung since a time", d.Host, alertstack.Target, tg.Hung, tg.HungSince, tg.AbandonedWorkers)
		return
	case tg.HungSince.Before(frozeAt) || tg.HungSince.After(seenAt):
		t.Errorf("%s /status.json: target %s hung since %s, not between the freeze (%s) and when the test saw it hung (%s)",
			d.Host, alertstack.Target, tg.HungSince.Format(time.RFC3339Nano), frozeAt.Format(time.RFC3339Nano), seenAt.Format(time.RFC3339Nano))
	}
	html, err := alertstack.HTTPGet(d.URL + "/")
	if err != nil {
		t.Fatalf("%s: %v", d.Host, err)
	}
	want := "Hung since " + tg.HungSince.UTC().Format("2006-01-02 15:04:05 UTC")
	if !bytes.Contains(html, []byte("Target "+alertstack.Target)) || !bytes.Contains(html, []byte(want)) {
		t.Errorf("%s status page does not name target %s as %q", d.Host, alertstack.Target, want)
	}
	t.Logf("%s status page (/status.json in %s): target %s hung since %s (%s after the freeze), %d abandoned worker(s)",
		d.Host, took.Round(time.Millisecond), tg.Name, tg.HungSince.Format("15:04:05.000"), tg.HungSince.Sub(frozeAt).Round(100*time.Millisecond), tg.AbandonedWorkers)
}

// checkPrometheusScrapedThrough asserts that Prometheus scraped every
// daemon through the freeze (up never 0) and logs the longest scrape it
// measured.
func checkPrometheusScrapedThrough(t *testing.T, s *alertstack.Stack, fault string, from, to time.Time) {
	t.Helper()
	rng := fmt.Sprintf(`{job="plateau"}[%ds]`, int64(to.Sub(from).Seconds())+1)
	if ago := int64(time.Since(to).Seconds()); ago > 0 {
		rng += fmt.Sprintf(" offset %ds", ago)
	}
	up, err := s.Prom.QueryNodes("min_over_time(up" + rng + ")")
	if err != nil {
		t.Fatal(err)
	}
	if len(up) != len(s.Daemons) {
		s.Errorf(t, "Prometheus has up for %d daemons over the freeze, want %d", len(up), len(s.Daemons))
	}
	for _, u := range up {
		if u.Value != 1 {
			s.Errorf(t, "Prometheus could not scrape %s during the freeze (min up %g)", s.HostOf(u.Metric["instance"]), u.Value)
		}
	}
	durs, err := s.Prom.QueryNodes("max_over_time(scrape_duration_seconds" + rng + ")")
	if err != nil {
		t.Fatal(err)
	}
	var b []string
	for _, d := range durs {
		b = append(b, fmt.Sprintf("%s %.1fms", s.HostOf(d.Metric["instance"]), d.Value*1000))
	}
	sort.Strings(b)
	t.Logf("%s: longest scrape Prometheus measured during the freeze: %s", fault, strings.Join(b, ", "))
}

// checkProbeDirsClean asserts that, once every daemon has had a run
// succeed after the thaw, no probe directory holds anything but the
// target's lock file and the run directory of a run going on now: a run
// killed by the freeze may have left its run directory, which the next
// run sweeps. A run directory is named run.<probe>.<pid>.<nanos> after
// its worker, and a worker removes its own before it exits, so one whose
// worker is not a live child of the daemon, and which is still there
// once that is known, is a leftover.
func checkProbeDirsClean(t *testing.T, s *alertstack.Stack, probeDirs map[*alertstack.Daemon]string) {
	t.Helper()
	for _, d := range s.Daemons {
		dir := filepath.Join(probeDirs[d], d.Host)
		names, err := readDirNames(dir, 30*time.Second)
		if err != nil {
			s.Errorf(t, "%s: %v", d.Host, err)
			continue
		}
		var left, running []string
		for _, n := range names {
			if n == ".lock" {
				continue
			}
			f := strings.Split(n, ".")
			if len(f) == 4 && f[0] == "run" && f[1] == alertstack.Probe {
				pid, err := strconv.Atoi(f[2])
				if err == nil && slices.ContainsFunc(childProcesses(d.Proc.Cmd.Process.Pid), func(c childProc) bool { return c.pid == pid }) {
					running = append(running, n)
					continue
				}
				if _, err := os.Lstat(filepath.Join(dir, n)); os.IsNotExist(err) {
					continue // its worker removed it and exited meanwhile
				}
			}
			left = append(left, n)
		}
		if len(left) > 0 {
			s.Errorf(t, "%s: probe directory %s holds %v after the recovery, want nothing but .lock (and the run going on: %v)", d.Host, dir, left, running)
		}
		swept := grepFile(d.Proc.Log, "swept_leftovers")
		t.Logf("%s: probe directory %s after the recovery: %v (of a run going on: %v); the daemon's log on sweeping: %s", d.Host, dir, names, running, alertstack.OrElse(strings.Join(swept, " | "), "nothing"))
	}
}

// readDirNames lists dir, failing after timeout rather than hanging on a
// mount that did not recover.
func readDirNames(dir string, timeout time.Duration) ([]string, error) {
	type result struct {
		names []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		entries, err := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		done <- result{names, err}
	}()
	select {
	case r := <-done:
		return r.names, r.err
	case <-time.After(timeout):
		return nil, fmt.Errorf("listing %s did not answer within %s (mount still hung?)", dir, timeout)
	}
}

// grepFile returns the lines of path that contain s.
func grepFile(path, s string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// freezeSampler scrapes every daemon's /metrics and counts its child
// processes, over and over, while a server of the cluster is frozen
// (the master in fault e, a chunkserver in fault d).
type freezeSampler struct {
	daemons []*alertstack.Daemon
	pids    map[*alertstack.Daemon]int
	done    chan struct{}
	stopped chan struct{}
	// stopOnce lets the test stop it before its checks and again,
	// harmlessly, in its deferred stop on the way out of a failure.
	stopOnce sync.Once

	mu          sync.Mutex
	latency     map[*alertstack.Daemon][]time.Duration
	errs        []string
	maxChildren map[*alertstack.Daemon]int
	atMax       map[*alertstack.Daemon]string
}

func startFreezeSampler(daemons []*alertstack.Daemon, pids map[*alertstack.Daemon]int) *freezeSampler {
	fs := &freezeSampler{daemons: daemons, pids: pids, done: make(chan struct{}), stopped: make(chan struct{}),
		latency: map[*alertstack.Daemon][]time.Duration{}, maxChildren: map[*alertstack.Daemon]int{}, atMax: map[*alertstack.Daemon]string{}}
	go func() {
		defer close(fs.stopped)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, d := range fs.daemons {
				fs.sample(d)
			}
			select {
			case <-fs.done:
				return
			case <-tick.C:
			}
		}
	}()
	return fs
}

func (fs *freezeSampler) sample(d *alertstack.Daemon) {
	start := time.Now()
	_, err := alertstack.HTTPGet(d.URL + "/metrics")
	took := time.Since(start)
	kids := childProcesses(fs.pids[d])
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err != nil {
		fs.errs = append(fs.errs, fmt.Sprintf("%s after %s: %v", d.Host, took.Round(time.Millisecond), err))
	} else {
		fs.latency[d] = append(fs.latency[d], took)
	}
	// The last sample at the maximum: the stuck worker, late in the
	// freeze, rather than the run it began as.
	if len(kids) >= fs.maxChildren[d] {
		fs.maxChildren[d] = max(fs.maxChildren[d], len(kids))
		var desc []string
		for _, k := range kids {
			desc = append(desc, k.String())
		}
		fs.atMax[d] = alertstack.OrElse(strings.Join(desc, "; "), "none")
	}
}

// stop ends the sampling and waits for the last sample; once stopped it
// does nothing.
func (fs *freezeSampler) stop() {
	fs.stopOnce.Do(func() { close(fs.done) })
	<-fs.stopped
}

// check asserts the bounds on what the sampler saw, and logs it.
func (fs *freezeSampler) check(t *testing.T, s *alertstack.Stack, fault string, from, to time.Time) {
	t.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, e := range fs.errs {
		s.Errorf(t, "%s: a scrape of /metrics failed during the freeze: %s", fault, e)
	}
	for _, d := range fs.daemons {
		lat := slices.Clone(fs.latency[d])
		slices.Sort(lat)
		if len(lat) == 0 {
			s.Errorf(t, "%s: no scrape of %s answered during the freeze", fault, d.Host)
			continue
		}
		worst := lat[len(lat)-1]
		t.Logf("%s: %d scrapes of %s over HTTP during the %s freeze: median %s, p90 %s, max %s; child processes at most %d (%s)",
			fault, len(lat), d.Host, to.Sub(from).Round(time.Second), lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)*9/10].Round(100*time.Microsecond),
			worst.Round(100*time.Microsecond), fs.maxChildren[d], fs.atMax[d])
		if worst > freezeScrapeBound {
			s.Errorf(t, "%s: a scrape of %s took %s during the freeze, over the bound %s", fault, d.Host, worst, freezeScrapeBound)
		}
		if fs.maxChildren[d] > freezeWorkerBound {
			s.Errorf(t, "%s: %s had %d child processes during the freeze, over the bound of %d worker (one target, one probe): %s",
				fault, d.Host, fs.maxChildren[d], freezeWorkerBound, fs.atMax[d])
		}
	}
}

// childProc is a child process as /proc shows it.
type childProc struct {
	pid         int
	state, wait string
	cmdline     string
	// blocked are the wait channels of its threads in uninterruptible
	// sleep (state D).
	blocked []string
}

func (p childProc) String() string {
	return fmt.Sprintf("pid %d state %s wchan %s, threads in D: %v: %s", p.pid, p.state, alertstack.OrElse(p.wait, "-"), p.blocked, p.cmdline)
}

// blockedThreads lists the wait channels of a process's threads in D.
func blockedThreads(dir string) []string {
	stats, _ := filepath.Glob(filepath.Join(dir, "task", "*", "stat"))
	var out []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 {
			if fields := strings.Fields(string(b[i+1:])); len(fields) > 0 && fields[0] == "D" {
				w, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "wchan"))
				out = append(out, alertstack.OrElse(string(w), "?"))
			}
		}
	}
	return out
}

// childProcesses lists the processes whose parent is ppid.
func childProcesses(ppid int) []childProc {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []childProc
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(ppid) {
			continue
		}
		dir := filepath.Dir(f)
		pid, _ := strconv.Atoi(filepath.Base(dir))
		wchan, _ := os.ReadFile(filepath.Join(dir, "wchan"))
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		out = append(out, childProc{pid: pid, state: fields[0], wait: string(wchan), cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")), blocked: blockedThreads(dir)})
	}
	return out
}

// waitHangResolved waits until, after a frozen server's thaw, every alert
// has resolved in Prometheus and in Alertmanager and the webhook got the
// resolved notification of each node's PlateauProbeHung (fired, by node)
// after the thaw.
func waitHangResolved(t *testing.T, s *alertstack.Stack, fault string, thaw time.Time, fired map[*alertstack.Daemon]alertstack.ReceivedAlert) {
	t.Helper()
	s.WaitFor(t, "every alert of fault "+fault+" to resolve", 3*time.Minute, func() (bool, error) {
		held, err := s.Prom.Alerts()
		if err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus still holds %d alerts (%v)", len(held), err)
		}
		am, err := s.AmAlerts("")
		if err != nil || len(am) > 0 {
			return false, fmt.Errorf("Alertmanager still holds %d alerts (%v)", len(am), err)
		}
		for d, a := range fired {
			if _, ok := s.Hook.First(func(r alertstack.ReceivedAlert) bool {
				return r.Status == "resolved" && r.Fingerprint == a.Fingerprint && r.At.After(thaw)
			}); !ok {
				return false, fmt.Errorf("no resolved notification of %s for %s yet", hungAlert, d.Host)
			}
		}
		return true, nil
	})
}
