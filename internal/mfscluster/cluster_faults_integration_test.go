//go:build integration

package mfscluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
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

	// clusterDiskSize is each chunkserver's device. Every probe run holds
	// its file's chunks for minutes after it removed the file: MooseFS
	// 3.0.117 keeps a file unlinked through mfsmount "sustained" while the
	// mount reports it open, whatever the trash time, and mfsmount reports
	// a file it released for 11 more of its once-a-minute reports
	// (mfsclient/mastercomm.c: ACQFILES_MAX_AGE 10, inodeswritecnt 60);
	// the master's emptysustained then frees it when its pass, one of 256
	// buckets a second, comes by (mfsmaster/filesystem.c). So a file stays
	// 11-15 minutes (measured: 12 of 12 removed 16 MiB files still
	// sustained 30s later and after drop_caches; the count falls from
	// 44,000 to 21,000 in the 5 minutes after fault c). A run of this
	// test holds ~200 runs x 8 MiB sustained, one copy each (goal 1 on
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
	// comes through that split, as docs/fleet.md's "Prometheus for a fleet"
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
// alert it should not raise. Each is a subtest, run in the order below,
// named for what it asserts, its test in a file of its own (named in
// brackets); `go test -run 'TestClusterFaults/b_'` runs one. The cluster,
// the stack and the calm rounds are the parent's, so any fault can run
// alone; a fault that fails makes those after it skip, since they would
// not start from the steady state they need.
//
//   - (g) 30 rounds with no fault: no alert of any kind fires, nothing is
//     notified (checkCalm, cluster_calm). A metadata probe under a second target joins every client
//     in g's last rounds, for fault c, with the master held to 15% of one
//     CPU (addMetadataTarget).
//   - (c) the master cut to 5% of one CPU: the file system's page
//     for the metadata target alone, the data target and the servers
//     quiet, the nodes' metadata pages held back; resolved after the
//     lift (faultMasterCPU, cluster_master_cpu). The metadata target leaves after it
//     (dropMetadataTarget).
//   - (b) one client's link throttled to 30% of its read rate: that node's
//     PlateauProbeRegression page only, no PlateauFileSystemRegression,
//     the notification naming the node (instance); resolved after the
//     throttle is lifted (faultClientLink, cluster_client_link).
//   - (e) the master frozen (SIGSTOP): every mount hangs; PlateauProbeHung
//     on every node and nothing else notified, scrapes fast, workers
//     bounded, the status page naming the hung target and since when;
//     after SIGCONT everything recovers without a restart
//     (faultMasterFrozen, cluster_freeze).
//   - (d) one chunkserver frozen (SIGSTOP) for several probe timeouts,
//     the victim's probe directory pinned to it and its peers' to the
//     others: the victim's run blocks and is counted as a timeout, its
//     target hung, PlateauProbeHung on that node only; the peers run and
//     succeed throughout with nothing counted and no alert; after
//     SIGCONT everything recovers without a restart, no probe file left
//     behind (faultChunkServerFrozen, cluster_chunkserver_freeze).
//   - (a) one chunkserver's disk throttled to a tenth, every client's probe
//     directory pinned to it: PlateauFileSystemRegression only, naming
//     that server from its own daemon's probes; the nodes' pages held
//     back; resolved after the lift (faultServerDiskSlow, cluster_server_disk).
//   - (f) the file system filled under the clients' min_free_ratio: the
//     data probe skips on every node with reason min_free, a metadata
//     probe reloaded in for the fault runs on, no probe file is left, no
//     page (PlateauProbeNotRun, the warning that the data probe does not
//     run, is the one alert allowed); once the space is freed every
//     node's data probe runs again (faultFileSystemFull, cluster_full).
func TestClusterFaults(t *testing.T) {
	f := startClusterFaults(t)
	f.run(t, "g_calm_raises_no_alert_and_notifies_nothing", func(t *testing.T) {
		checkCalm(t, f.s)
	})
	f.run(t, "c_master_cpu_cut_pages_the_metadata_file_system_alone", func(t *testing.T) {
		waitMetadataScores(t, f.s, f.tl)
		faultMasterCPU(t, f.s, f.c, f.tl)
		f.dropMetadataTarget(t)
	})
	// The metadata target joined in the calm for fault c alone; when c
	// was not run, it leaves here, as c would have made it.
	if f.metadataIn && f.failed == "" {
		f.dropMetadataTarget(t)
	}
	f.run(t, "b_client_link_throttled_pages_that_node_alone", func(t *testing.T) {
		faultClientLink(t, f.s, f.tl, f.s.Daemons[1], f.c.Clients[1], f.medianRead)
	})
	f.run(t, "e_master_frozen_hangs_every_node_and_recovers", func(t *testing.T) {
		faultMasterFrozen(t, f.s, f.c, f.tl, f.probeDirs)
	})
	f.run(t, "d_chunkserver_frozen_hangs_its_writer_alone_and_recovers", func(t *testing.T) {
		faultChunkServerFrozen(t, f.s, f.c, f.tl, f.probeDirs)
	})
	f.run(t, "a_server_disk_slow_pages_the_file_system_naming_the_server", func(t *testing.T) {
		faultServerDiskSlow(t, f.s, f.c, f.tl, f.probeDirs)
	})
	// Last, since what the cluster does once the space is back is not
	// the fault's (faultFileSystemFull).
	f.run(t, "f_file_system_full_skips_the_data_probes_without_a_page", func(t *testing.T) {
		faultFileSystemFull(t, f.s, f.c, f.tl, f.probeDirs, f.baselines)
	})
	f.s.LogSeriesHeld(t)
}

// clusterFaults is what TestClusterFaults's faults share: the cluster,
// the stack on it, and what the calm measured.
type clusterFaults struct {
	c         *mfscluster.Cluster
	s         *alertstack.Stack
	tl        *alertstack.Timeline
	probeDirs map[*alertstack.Daemon]string
	baselines string
	// medianRead is each client's median read rate over the calm.
	medianRead map[*alertstack.Daemon]float64
	// metadataIn says the clients still probe the metadata target that
	// joined in the calm's last rounds for fault c.
	metadataIn bool
	// failed names the first fault that failed, after which the others
	// skip.
	failed string
}

// run runs one fault as a subtest, unless one before it failed: a fault
// starts from the steady state the one before it leaves, and a failed
// one leaves none.
func (f *clusterFaults) run(t *testing.T, name string, fault func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		if f.failed != "" {
			t.Skipf("%s failed, so the cluster is not in the steady state this fault starts from", f.failed)
		}
		defer func() {
			if t.Failed() {
				f.failed = name
			}
		}()
		fault(t)
		logSpace(t, f.c, "after "+name)
	})
}

func (f *clusterFaults) dropMetadataTarget(t *testing.T) {
	t.Helper()
	dropMetadataTarget(t, f.s, f.c, f.tl, f.probeDirs, f.baselines)
	f.metadataIn = false
}

// startClusterFaults brings up the cluster and the stack on it and runs
// the calm rounds every fault starts from: fault g's, whose last rounds
// are also the metadata target's first, for fault c.
func startClusterFaults(t *testing.T) *clusterFaults {
	t.Helper()
	promBin, amBin := alertstack.RequirePrereqs(t)
	hosts := alertstack.SpreadHosts(t, clusterClients, clusterInterval)
	s := &alertstack.Stack{
		Opts: alertstack.Options{
			Hosts:               hosts,
			Interval:            clusterInterval,
			Timeout:             clusterTimeout,
			Splay:               true,
			FileSize:            clusterFileSize,
			Plateau:             clusterLink,
			CharacterizeSpacing: time.Second,
			PromInterval:        time.Second,
			DurationScale:       clusterScale,
			Racks:               clusterRacks,
		},
		Dir: t.TempDir(),
	}
	// Before the cluster, whose processes log their tails on failure:
	// the digest of what failed then prints after them.
	s.ReportFailuresLast(t)
	c := mfscluster.Start(t, mfscluster.Options{ChunkServers: 3, Clients: clusterClients, DiskSize: clusterDiskSize, DiskRate: clusterDiskRate})
	s.BuildExporter(t)

	makeProbeRoot(t, c.Clients[0])
	baselines := filepath.Join(s.Dir, "baselines.yml")
	probeDirs := map[*alertstack.Daemon]string{}
	metadataProbe := metadataProbeName(t, hosts, clusterInterval)
	for i, h := range hosts {
		cl := c.Clients[i]
		// Each client probes a directory of its own, through its own
		// mount, under the one target name; its metadata target, beside
		// it, joins for fault c only.
		dir := filepath.Join(cl.Mount, "plateau", h)
		for _, p := range []string{dir, metadataTargetOf(dir, metadataProbe).Path} {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		d := &alertstack.Daemon{Host: h, ConfigFile: filepath.Join(s.Dir, h+".yml")}
		alertstack.WriteTargetConfig(t, d.ConfigFile, s.Opts, baselines, clientTarget(dir, false))
		if err := cl.ThrottleNetwork(clusterLink); err != nil {
			t.Fatal(err)
		}
		s.Daemons = append(s.Daemons, d)
		probeDirs[d] = dir
		t.Logf("%s on %s probes %s, link shaped to %.0f MB/s", h, cl, dir, clusterLink/1e6)
	}
	s.CharacterizeOn(t, nil, s.Daemons[0].ConfigFile, hosts[0])
	// The link must be what sets the plateau, or a throttle of it would
	// not mean what the test says.
	for op, v := range s.Baseline {
		if v < 0.5*clusterLink || v > 1.3*clusterLink {
			s.Fatalf(t, "characterized %s at %.1f MB/s through a link shaped to %.0f MB/s: the link does not set the plateau", op, v/1e6, clusterLink/1e6)
		}
	}
	s.StartDaemons(t, func(*alertstack.Daemon) []string { return nil })
	startServerDaemons(t, s, c)
	s.StartMonitoring(t, promBin, amBin)
	tl := s.WatchAlerts(t)
	logSpace(t, c, "at the start")
	t.Cleanup(func() { logSpace(t, c, "at the end") })

	// Fault g: calm. Its last rounds are the metadata target's first,
	// for fault c.
	tl.Mark(t, "fault g: %d rounds with no fault", clusterCalmRounds)
	waitRounds := func(n int) {
		s.WaitFor(t, fmt.Sprintf("%d rounds of runs", n), time.Duration(n)*3*clusterInterval+2*time.Minute, func() (bool, error) {
			return s.Rounds() >= n, failedRuns(s)
		})
	}
	waitRounds(clusterCalmRounds - metadataScoreRuns)
	addMetadataTarget(t, s, c, tl, probeDirs, baselines, metadataProbe)
	waitRounds(clusterCalmRounds)
	s.WaitEvaluatedPastRuns(t)
	alertstack.WaitChangeRatio(t, s, time.Minute)
	calmEnd := tl.Mark(t, "%d rounds done", s.Rounds())
	medianRead := map[*alertstack.Daemon]float64{}
	for _, d := range s.Daemons {
		medianRead[d] = d.Runs.MedianRate("read", calmEnd)
		runs, _ := d.Runs.Snapshot()
		t.Logf("%s calm: median read %.1f MB/s, write %.1f MB/s over %d runs; last run %s",
			d.Host, medianRead[d]/1e6, d.Runs.MedianRate("write", calmEnd)/1e6, len(runs), runs[len(runs)-1])
	}
	s.LogOverlaps(t, s.Start, calmEnd)
	return &clusterFaults{c: c, s: s, tl: tl, probeDirs: probeDirs, baselines: baselines, medianRead: medianRead, metadataIn: true}
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
func checkNotifiedOnly(s *alertstack.Stack, t *testing.T, fault string, t0 time.Time, expected func(alertstack.ReceivedAlert) bool, want string) {
	t.Helper()
	for _, a := range s.Hook.Received() {
		if a.At.Before(t0) || expected(a) {
			continue
		}
		if want == "" {
			s.Errorf(t, "fault %s: the webhook received %s %s at %s", fault, a.Status, s.AlertKey(a.Labels), s.Since(a.At))
		} else {
			s.Errorf(t, "fault %s: the webhook received %s %s at %s; only %s was expected", fault, a.Status, s.AlertKey(a.Labels), s.Since(a.At), want)
		}
	}
}

// isFSPageOf says whether a notification is the file-system page of
// target.
func isFSPageOf(target string) func(alertstack.ReceivedAlert) bool {
	return func(a alertstack.ReceivedAlert) bool {
		return a.Labels["alertname"] == alertstack.FsRegressionAlert && a.Labels["target"] == target
	}
}

// waitFSPage waits for the webhook's first firing notification of the
// file-system page of target since the fault began at t0, marks it with
// its delay, and checks what the on-call sees of it.
func waitFSPage(s *alertstack.Stack, t *testing.T, tl *alertstack.Timeline, target string, t0 time.Time) alertstack.ReceivedAlert {
	t.Helper()
	isFSPage := isFSPageOf(target)
	var fired alertstack.ReceivedAlert
	s.WaitFor(t, "the webhook to receive "+alertstack.FsRegressionAlert+" for "+target, 3*time.Minute, func() (bool, error) {
		a, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool { return a.Status == "firing" && isFSPage(a) && a.At.After(t0) })
		fired = a
		return ok, failedRuns(s)
	})
	delay := fired.At.Sub(t0)
	tl.Mark(t, "FIRED: the webhook received %s for %s, %s after the fault (%.1f probe intervals)", alertstack.FsRegressionAlert, target, delay.Round(time.Second), delay.Seconds()/clusterInterval.Seconds())
	alertstack.CheckFSAlert(t, s, fired, target)
	return fired
}

// waitResolved waits, once a fault was lifted at lifted, until Prometheus
// holds no alert and the webhook has had the resolved notification of the
// fault's page, fired. The members of a file-system page's incident
// (PlateauFileSystemIncident) resolve last: once each node's 24-run
// median is back over its warning threshold, up to plateau.LongMedianRuns
// runs after the lift, and their shortened keep_firing_for later; so the
// deadline is the 3 minutes the pages took, and those runs more (in
// CI18, fault c's members resolved 2m46s after the lift).
func waitResolved(s *alertstack.Stack, t *testing.T, tl *alertstack.Timeline, fired alertstack.ReceivedAlert, lifted time.Time) {
	t.Helper()
	deadline := 3*time.Minute + time.Duration(plateau.LongMedianRuns)*clusterInterval
	s.WaitFor(t, "every alert to resolve after the lift", deadline, func() (bool, error) {
		held, err := s.Prom.Alerts()
		if err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus holds %d alerts (%v)", len(held), err)
		}
		_, ok := s.Hook.First(func(a alertstack.ReceivedAlert) bool {
			return a.Status == "resolved" && a.Fingerprint == fired.Fingerprint
		})
		return ok, fmt.Errorf("no resolved notification of %s yet", fired.Labels["alertname"])
	})
	tl.Mark(t, "RESOLVED: everything, %s after the lift", time.Since(lifted).Round(time.Second))
}

// checkNoAlert fails the test if an alert of selector fired at any
// evaluation since t0; pending ones are logged as noise.
func checkNoAlert(s *alertstack.Stack, t *testing.T, t0 time.Time, selector, when string) {
	t.Helper()
	// Alerts of severity none notify no one: they only hold others back
	// (PlateauFileSystemIncident, the nodes of an earlier fault's page
	// until an hour after they recover).
	for _, fired := range s.FiredSince(t, t0, alertstack.WithMatcher(selector, `severity!="none"`), when) {
		s.Errorf(t, "%s", fired)
	}
}

// requireSteady fails the test unless Prometheus holds no alert, pending
// or firing, and Alertmanager none: a fault must start from calm, so that
// what follows is the fault's.
func requireSteady(s *alertstack.Stack, t *testing.T) {
	t.Helper()
	held, err := s.Prom.Alerts()
	if err != nil {
		t.Fatal(err)
	}
	am, err := s.AmAlerts("")
	if err != nil {
		t.Fatal(err)
	}
	if len(held) > 0 || len(am) > 0 {
		var keys []string
		for _, a := range held {
			keys = append(keys, s.AlertKey(a.Labels)+" "+a.State)
		}
		for _, a := range am {
			keys = append(keys, "Alertmanager "+s.AlertKey(a.Labels))
		}
		s.Fatalf(t, "not in a steady state before the fault: %s", strings.Join(keys, "; "))
	}
}

// failedRuns says why the daemons' probes fail, if any does: a full file
// system or a hung mount shows here long before a deadline.
func failedRuns(s *alertstack.Stack) error {
	got, err := s.Prom.QueryNodes(`sum by (instance, reason) (increase(plateau_probe_errors_total[1m])) > 0`)
	if err != nil || len(got) == 0 {
		return err
	}
	var b []string
	for _, g := range got {
		b = append(b, fmt.Sprintf("%s: %.0f failures (%s)", s.HostOf(g.Metric["instance"]), g.Value, g.Metric["reason"]))
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
