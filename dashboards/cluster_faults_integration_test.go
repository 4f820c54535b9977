//go:build integration

package dashboards

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
)

const (
	// Four MooseFS clients, as in TestFleetAlerts: one node alone is a
	// quarter of the fleet, which PlateauFileSystemRegression's "at least
	// two" must keep a node alert.
	clusterClients = 4

	// clusterLink is each client's link (tbf on its veth, both ways): well
	// under what the cluster gives one client on this machine (unthrottled,
	// 16 MiB writes ran at 37-104 MB/s and reads at 63-454 MB/s), so that
	// the link, not the CPU the cluster's daemons share with everything
	// else, sets each client's plateau and its runs repeat.
	clusterLink = 16e6

	// Small probes, 8 MiB each way (~0.55s at the link's rate, ~1.2s a
	// run with the creates and fsync through the master), at an interval
	// whose four splayed slots are 1.5s apart, so that runs of different
	// clients rarely meet. A client throttled to 30% runs ~3.5s, still
	// inside the timeout.
	clusterInterval = 6 * time.Second
	clusterTimeout  = 5 * time.Second
	clusterFileSize = 8 << 20

	// clusterScale shortens the rules for the 6s interval as
	// durationScale does for 5s: 15m, one production run, becomes two
	// runs here (12s).
	clusterScale = 75

	// clusterCalmRounds as TestFleetAlerts: 30 rounds leave each node 23
	// runs of normal after the change statistic's first 17.
	clusterCalmRounds = 30

	// clusterFaultFraction is fault b's link throttle, a share of the
	// client's measured read rate.
	clusterFaultFraction = 0.3

	// clusterDiskSize is each chunkserver's device. Every probe run leaks
	// its file's chunks: MooseFS 3.0.117 keeps a file unlinked through
	// mfsmount as "sustained" (reserved) for as long as the mount lives,
	// whatever the trash time (measured: 12 of 12 removed 16 MiB files
	// still sustained 30s later and after drop_caches). A run of this
	// test leaves ~200 runs x 8 MiB sustained, one copy each (goal 1 on
	// the probe directory): 1.5 GiB after fault d, against 3 x (2 GiB -
	// 256 MiB) of chunk space. Each loop image is written in full before
	// mkfs (probetest.MountLoopIn: a sparse image is no steady state), so
	// the cluster holds 3 x clusterDiskSize of RAM in /dev/shm for the
	// whole test: 6 GiB here, where 4 GiB disks held 12 of the machine's
	// 24.
	clusterDiskSize = 2 << 30

	// clusterRacks is how many rack Prometheus servers scrape the
	// clients, two each, and the chunkservers' daemons, dealt out in turn,
	// under the global one that pulls federate.yml's selection from them
	// and evaluates the fleet's alerts: every page of the faults below
	// comes through that split, as README.md's "Prometheus for a fleet"
	// deploys it.
	clusterRacks = 2
)

// TestClusterFaults deploys the product on a real MooseFS cluster: a
// master, three chunkservers on RAM-backed loop devices, and four client
// hosts, each in its own network namespace with its link shaped to
// clusterLink; one plateau_exporter per client probing its mount under one
// target name (so the fleet rules see the clients as peers), one per
// chunkserver probing its own disk (each of clusterDiskRate) under a target
// that serves the clients' (startServerDaemons); two rack Prometheus
// servers with rules.yml and alerts.yml, each scraping two clients and
// some of the chunkservers, and a global one that federates
// dashboards/federate.yml's selection from them and evaluates rules.yml and
// fleet_alerts.yml (clusterRacks); one Alertmanager with the shipped route
// and inhibitions.
// Each fault starts from a steady state and asserts the absence of every
// alert it should not raise.
//
//   - (g) 30 rounds with no fault: no alert of any kind fires, nothing is
//     notified. A metadata probe under a second target joins every client
//     in g's last rounds, for fault c, with the master held to 15% of one
//     CPU (addMetadataTarget).
//   - (c) the master cut to 5% of one CPU: the file system's page
//     for the metadata target alone, the data target and the servers
//     quiet, the nodes' metadata pages held back; resolved after the
//     lift (faultMasterCPU). The metadata target leaves after it
//     (dropMetadataTarget).
//   - (b) one client's link throttled to 30% of its read rate: that node's
//     PlateauProbeRegression page only, no PlateauFileSystemRegression,
//     the notification naming the node (instance); resolved after the
//     throttle is lifted.
//   - (e) the master frozen (SIGSTOP): every mount hangs; PlateauProbeHung
//     on every node and nothing else notified, scrapes fast, workers
//     bounded, the status page naming the hung target and since when;
//     after SIGCONT everything recovers without a restart
//     (faultMasterFrozen).
//   - (d) one chunkserver frozen (SIGSTOP) for several probe timeouts,
//     the victim's probe directory pinned to it and its peers' to the
//     others: the victim's run blocks and is counted as a timeout, its
//     target hung, PlateauProbeHung on that node only; the peers run and
//     succeed throughout with nothing counted and no alert; after
//     SIGCONT everything recovers without a restart, no probe file left
//     behind (faultChunkServerFrozen).
//   - (a) one chunkserver's disk throttled to a tenth, every client's probe
//     directory pinned to it: PlateauFileSystemRegression only, naming
//     that server from its own daemon's probes; the nodes' pages held
//     back; resolved after the lift (faultServerDiskSlow).
//   - (f) the file system filled under the clients' min_free_ratio: the
//     data probe skips on every node with reason min_free, a metadata
//     probe reloaded in for the fault runs on, no probe file is left, no
//     page (PlateauProbeNotRun, the warning that the data probe does not
//     run, is the one alert allowed); once the space is freed every
//     node's data probe runs again (faultFileSystemFull).
func TestClusterFaults(t *testing.T) {
	promBin, amBin := requireAlertingPrereqs(t)
	c := mfscluster.Start(t, mfscluster.Options{ChunkServers: 3, Clients: clusterClients, DiskSize: clusterDiskSize, DiskRate: clusterDiskRate})
	hosts := spreadHosts(t, clusterClients, clusterInterval)
	s := &alertStack{
		opts: stackOptions{
			hosts:               hosts,
			interval:            clusterInterval,
			timeout:             clusterTimeout,
			splay:               true,
			fileSize:            clusterFileSize,
			plateau:             clusterLink,
			characterizeSpacing: time.Second,
			promInterval:        time.Second,
			durationScale:       clusterScale,
			racks:               clusterRacks,
		},
		dir: t.TempDir(),
	}
	s.buildExporter(t)

	makeProbeRoot(t, c.Clients[0])
	baselines := filepath.Join(s.dir, "baselines.yml")
	probeDirs := map[*stackDaemon]string{}
	metadataProbe := metadataProbeName(t, hosts, clusterInterval)
	for i, h := range hosts {
		cl := c.Clients[i]
		// Each client probes a directory of its own, through its own
		// mount, under the one target name; its metadata target, beside
		// it, joins for fault c only.
		dir := filepath.Join(cl.Mount, "plateau", h)
		for _, p := range []string{dir, metadataTargetOf(dir, metadataProbe).path} {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		d := &stackDaemon{host: h, configFile: filepath.Join(s.dir, h+".yml")}
		writeTargetConfig(t, d.configFile, s.opts, baselines, clientTarget(dir, false))
		if err := cl.ThrottleNetwork(clusterLink); err != nil {
			t.Fatal(err)
		}
		s.daemons = append(s.daemons, d)
		probeDirs[d] = dir
		t.Logf("%s on %s probes %s, link shaped to %.0f MB/s", h, cl, dir, clusterLink/1e6)
	}
	clientOf := func(d *stackDaemon) *mfscluster.Client {
		for i, x := range s.daemons {
			if x == d {
				return c.Clients[i]
			}
		}
		t.Fatalf("no client for %s", d.host)
		return nil
	}
	s.characterizeOn(t, nil, s.daemons[0].configFile, hosts[0])
	// The link must be what sets the plateau, or a throttle of it would
	// not mean what the test says.
	for op, v := range s.baseline {
		if v < 0.5*clusterLink || v > 1.3*clusterLink {
			t.Fatalf("characterized %s at %.1f MB/s through a link shaped to %.0f MB/s: the link does not set the plateau", op, v/1e6, clusterLink/1e6)
		}
	}
	s.startDaemons(t, func(*stackDaemon) []string { return nil })
	startServerDaemons(t, s, c)
	s.startMonitoring(t, promBin, amBin)
	tl := s.watchAlerts(t)
	logSpace(t, c, "at the start")
	t.Cleanup(func() { logSpace(t, c, "at the end") })

	// Fault g: calm.
	// Fault g: calm. Its last rounds are the metadata target's first,
	// for fault c.
	tl.mark(t, "fault g: %d rounds with no fault", clusterCalmRounds)
	waitRounds := func(n int) {
		waitFor(t, fmt.Sprintf("%d rounds of runs", n), time.Duration(n)*3*clusterInterval+2*time.Minute, func() (bool, error) {
			return s.rounds() >= n, s.failedRuns()
		})
	}
	waitRounds(clusterCalmRounds - metadataScoreRuns)
	addMetadataTarget(t, s, c, tl, probeDirs, baselines, metadataProbe)
	waitRounds(clusterCalmRounds)
	s.waitEvaluatedPastRuns(t)
	waitChangeRatio(t, s, time.Minute)
	calmEnd := tl.mark(t, "%d rounds done", s.rounds())
	medianRead := map[*stackDaemon]float64{}
	for _, d := range s.daemons {
		medianRead[d] = d.runs.medianRate("read", calmEnd)
		runs, _ := d.runs.snapshot()
		t.Logf("%s calm: median read %.1f MB/s, write %.1f MB/s over %d runs; last run %s",
			d.host, medianRead[d]/1e6, d.runs.medianRate("write", calmEnd)/1e6, len(runs), runs[len(runs)-1])
	}
	s.logOverlaps(t, s.start, calmEnd)
	s.checkNoAlert(t, s.start, `ALERTS`, "with no fault")
	s.checkNotifiedOnly(t, "g", s.start, func(receivedAlert) bool { return false }, "")
	if t.Failed() {
		t.FailNow()
	}
	logSpace(t, c, "after fault g")

	// Fault c: the metadata server's CPU.
	waitMetadataScores(t, s, tl)
	faultMasterCPU(t, s, c, tl)
	dropMetadataTarget(t, s, c, tl, probeDirs, baselines)
	logSpace(t, c, "after fault c")

	// Fault b: one client's network. From calm: fault c's last alert may
	// have resolved in the evaluation just before.
	s.waitCalm(t, "fault b")
	victim := s.daemons[1]
	vc := clientOf(victim)
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
	logSpace(t, c, "after fault b")

	// Fault e: the metadata server frozen.
	faultMasterFrozen(t, s, c, tl, probeDirs)
	logSpace(t, c, "after fault e")

	// Fault d: one chunkserver frozen.
	faultChunkServerFrozen(t, s, c, tl, probeDirs)
	logSpace(t, c, "after fault d")

	// Fault a: one chunkserver's disk slow.
	faultServerDiskSlow(t, s, c, tl, probeDirs)
	logSpace(t, c, "after fault a")

	// Fault f: the file system full. Last, since what the cluster does
	// once the space is back is not the fault's (faultFileSystemFull).
	faultFileSystemFull(t, s, c, tl, probeDirs, baselines)
	logSpace(t, c, "after fault f")
	s.logSeriesHeld(t)
}

// makeProbeRoot makes the probes' directory, "plateau" at the root of
// the file system, through cl: trash time 0 and one copy per chunk, set
// before anything is created in it so every probe directory and file
// inherits them (a write then crosses its writer's link once).
func makeProbeRoot(t *testing.T, cl *mfscluster.Client) string {
	t.Helper()
	root := filepath.Join(cl.Mount, "plateau")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"mfssettrashtime", "-r", "0", root}, {"mfssetgoal", "-r", "1", root}} {
		if _, err := cl.Run(argv[0], argv[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, argv := range [][]string{{"mfsgettrashtime", root}, {"mfsgetgoal", root}} {
		out, err := cl.Run(argv[0], argv[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", out)
	}
	return root
}

// checkNotifiedOnly fails the test for every notification the webhook
// received since fault began at t0 that is not expected; want says what
// was ("" for nothing).
func (s *alertStack) checkNotifiedOnly(t *testing.T, fault string, t0 time.Time, expected func(receivedAlert) bool, want string) {
	t.Helper()
	for _, a := range s.hook.received() {
		if a.At.Before(t0) || expected(a) {
			continue
		}
		if want == "" {
			t.Errorf("fault %s: the webhook received %s %s at %s", fault, a.Status, s.alertKey(a.Labels), s.since(a.At))
		} else {
			t.Errorf("fault %s: the webhook received %s %s at %s; only %s was expected", fault, a.Status, s.alertKey(a.Labels), s.since(a.At), want)
		}
	}
}

// isFSPageOf says whether a notification is the file-system page of
// target.
func isFSPageOf(target string) func(receivedAlert) bool {
	return func(a receivedAlert) bool {
		return a.Labels["alertname"] == fsRegressionAlert && a.Labels["target"] == target
	}
}

// waitFSPage waits for the webhook's first firing notification of the
// file-system page of target since the fault began at t0, marks it with
// its delay, and checks what the on-call sees of it.
func (s *alertStack) waitFSPage(t *testing.T, tl *timeline, target string, t0 time.Time) receivedAlert {
	t.Helper()
	isFSPage := isFSPageOf(target)
	var fired receivedAlert
	waitFor(t, "the webhook to receive "+fsRegressionAlert+" for "+target, 3*time.Minute, func() (bool, error) {
		a, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "firing" && isFSPage(a) && a.At.After(t0) })
		fired = a
		return ok, s.failedRuns()
	})
	delay := fired.At.Sub(t0)
	tl.mark(t, "FIRED: the webhook received %s for %s, %s after the fault (%.1f probe intervals)", fsRegressionAlert, target, delay.Round(time.Second), delay.Seconds()/clusterInterval.Seconds())
	checkFSAlert(t, s, fired, target)
	return fired
}

// waitResolved waits, once a fault was lifted at lifted, until Prometheus
// holds no alert and the webhook has had the resolved notification of the
// fault's page, fired.
func (s *alertStack) waitResolved(t *testing.T, tl *timeline, fired receivedAlert, lifted time.Time) {
	t.Helper()
	waitFor(t, "every alert to resolve after the lift", 3*time.Minute, func() (bool, error) {
		held, err := s.prom.alerts()
		if err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus holds %d alerts (%v)", len(held), err)
		}
		_, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "resolved" && a.Fingerprint == fired.Fingerprint })
		return ok, fmt.Errorf("no resolved notification of %s yet", fired.Labels["alertname"])
	})
	tl.mark(t, "RESOLVED: everything, %s after the lift", time.Since(lifted).Round(time.Second))
}

// checkNoAlert fails the test if an alert of selector fired at any
// evaluation since t0; pending ones are logged as noise.
func (s *alertStack) checkNoAlert(t *testing.T, t0 time.Time, selector, when string) {
	t.Helper()
	sel := strings.TrimSuffix(selector, "}")
	if strings.Contains(sel, "{") {
		sel += ","
	} else {
		sel += "{"
	}
	for _, state := range []string{"firing", "pending"} {
		got, err := s.prom.countOverRange(sel+`alertstate="`+state+`"}`, t0)
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

// requireSteady fails the test unless Prometheus holds no alert, pending
// or firing, and Alertmanager none: a fault must start from calm, so that
// what follows is the fault's.
func (s *alertStack) requireSteady(t *testing.T) {
	t.Helper()
	held, err := s.prom.alerts()
	if err != nil {
		t.Fatal(err)
	}
	am, err := s.amAlerts("")
	if err != nil {
		t.Fatal(err)
	}
	if len(held) > 0 || len(am) > 0 {
		var keys []string
		for _, a := range held {
			keys = append(keys, s.alertKey(a.Labels)+" "+a.State)
		}
		for _, a := range am {
			keys = append(keys, "Alertmanager "+s.alertKey(a.Labels))
		}
		t.Fatalf("not in a steady state before the fault: %s", strings.Join(keys, "; "))
	}
}

// failedRuns says why the daemons' probes fail, if any does: a full file
// system or a hung mount shows here long before a deadline.
func (s *alertStack) failedRuns() error {
	got, err := s.prom.queryNodes(`sum by (instance, reason) (increase(plateau_probe_errors_total[1m])) > 0`)
	if err != nil || len(got) == 0 {
		return err
	}
	var b []string
	for _, g := range got {
		b = append(b, fmt.Sprintf("%s: %.0f failures (%s)", s.hostOf(g.Metric["instance"]), g.Value, g.Metric["reason"]))
	}
	return fmt.Errorf("probes failing: %s", strings.Join(b, "; "))
}

// logSpace logs the cluster's space as the master counts it: what is
// available, and what removed files still hold (trash and sustained).
func logSpace(t *testing.T, c *mfscluster.Cluster, when string) {
	t.Helper()
	out, err := c.Master.Run("mfscli", "-H", c.Master.Addr, "-SIN", "-p")
	if err != nil {
		t.Logf("space %s: %v", when, err)
		return
	}
	var parts []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 3 || f[0] != "master info:" {
			continue
		}
		switch f[1] {
		case "total space", "avail space", "trash space", "sustained space":
			if v, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				parts = append(parts, fmt.Sprintf("%s %d MiB", f[1], v>>20))
			}
		case "trash files", "sustained files", "files":
			parts = append(parts, f[1]+" "+f[2])
		}
	}
	t.Logf("MooseFS space %s: %s", when, strings.Join(parts, ", "))
}
