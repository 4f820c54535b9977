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

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

const (
	// serverTarget is each storage server's own target: a directory on
	// its data device beside the chunks, which `serves` the clients'
	// target (stackTarget).
	serverTarget = "chunk-disk"

	// clusterDiskRate is each chunkserver's device speed for the
	// chunkserver (mfscluster.Options.DiskRate), twice what the four
	// clients' links carry together, so that no server limits the clients
	// until a fault does; a tenth of it (fault a) is under one client's
	// link.
	clusterDiskRate = 128e6
	// serverProbeRate is the same device's speed for the server's own
	// probe: a blkio cgroup of its own, throttled as the chunkserver's is
	// in fault a. The throttle sets the probe's plateau as the link sets
	// the clients' (unthrottled, 16 MiB O_DIRECT runs of this RAM-backed
	// loop device went at 1.6 to 3.0 GB/s, CV 19%). A cgroup of its own,
	// because one shared with the chunkserver made the probe bimodal: the
	// throttle lets ~20ms of I/O through at once to an idle group, and 10
	// of 114 runs at 128 MB/s, beside the chunkserver, missed it and ran
	// at 116-129 MB/s instead of 150-157, a fall of 18% that the low
	// score (5% noise floor) counts as -4. Alone, at this rate, the same
	// ~20ms (the throttle's slice, which also paces each bio's wait) are
	// the spread: 8 MiB ops of 0.26s ran at 31 to 41 MB/s over 40 runs.
	serverProbeRate = 32e6
	// serverFileSize is the servers' probe, 0.52s each way: the slice is
	// 4% of it, under the low score's noise floor.
	serverFileSize = 16 << 20
	// serverInterval and serverTimeout: throttled to a tenth (3.2 MB/s), a
	// server's run moves 33.6 MB in 10.5s, inside the timeout.
	serverInterval = 15 * time.Second
	serverTimeout  = 13 * time.Second

	// clusterDiskFaultFraction is fault a's disk throttle, a share of the
	// device's rate.
	clusterDiskFaultFraction = 0.1
)

// startServerDaemons deploys a plateau_exporter on every chunkserver, as
// on a site's storage servers: each probes a directory of its own data
// device (the chunkserver's disk) under serverTarget, which serves the
// clients' target, in a blkio cgroup of the device's own for it
// (serverProbeRate), which fault a throttles with the chunkserver's. The
// baseline comes from characterize on the first server. Called before
// startMonitoring, which scrapes them as serverJob.
func startServerDaemons(t *testing.T, s *alertstack.Stack, c *mfscluster.Cluster) {
	t.Helper()
	o := s.Opts
	o.Interval, o.Timeout, o.FileSize = serverInterval, serverTimeout, serverFileSize
	baselines := filepath.Join(s.Dir, "server-baselines.yml")
	for _, cs := range c.ChunkServers {
		dir := filepath.Join(cs.Disk.Mount, "plateau")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cg := probetest.NewIOCgroup(t, cs.Disk.DevNum)
		if err := cg.Throttle(serverProbeRate); err != nil {
			t.Fatal(err)
		}
		d := &alertstack.Daemon{Host: cs.Name, Cgroup: cg, ConfigFile: filepath.Join(s.Dir, cs.Name+".yml")}
		alertstack.WriteTargetConfig(t, d.ConfigFile, o, baselines, alertstack.ExporterTarget{Name: serverTarget, Path: dir, Serves: alertstack.Target})
		s.Servers = append(s.Servers, d)
	}
	first := s.Servers[0]
	s.RunCharacterize(t, alertstack.InCgroup(first.Cgroup), first.ConfigFile, first.Host)
	b, err := plateau.LoadBaselines(baselines)
	if err != nil {
		s.Fatalf(t, "reading the servers' characterized baselines: %v", err)
	}
	for _, op := range []string{"write", "read"} {
		e := b.Entries[plateau.BaselineKey{Target: serverTarget, Probe: alertstack.Probe, Op: op}]
		if e == nil || e.Unit != probe.UnitBytesPerSecond {
			s.Fatalf(t, "the servers' baselines have no %s throughput: %+v", op, e)
		}
		// The device's rate must be what sets the plateau, or a tenth of
		// it would not mean what the test says.
		if e.Value < 0.8*serverProbeRate || e.Value > 1.3*serverProbeRate {
			s.Fatalf(t, "characterized the servers' %s at %.0f MB/s on devices of %.0f MB/s: the device does not set the plateau", op, e.Value/1e6, serverProbeRate/1e6)
		}
	}
	for _, d := range s.Servers {
		s.StartExporter(t, d, alertstack.InCgroup(d.Cgroup))
	}
	for _, d := range s.Servers {
		alertstack.WaitReady(t, d.Proc, d.URL+"/-/healthy")
		pids, err := d.Cgroup.Pids()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pids, d.Proc.Cmd.Process.Pid) {
			s.Fatalf(t, "server daemon %s (pid %d) is not in its cgroup %s (its processes: %v)", d.Host, d.Proc.Cmd.Process.Pid, d.Cgroup, pids)
		}
		d.Runs = alertstack.WatchTargetRuns(t, d.URL+"/metrics", serverTarget, serverInterval/10)
		t.Logf("%s: plateau_exporter at %s probes its own disk under %s (serves %s)", d.Host, d.Addr, serverTarget, alertstack.Target)
	}
}

// logServerRuns logs the spread of each server's own runs before t0: the
// steadiness its low score is measured against.
func logServerRuns(t *testing.T, s *alertstack.Stack, t0 time.Time) {
	t.Helper()
	for _, d := range s.Servers {
		runs, _ := d.Runs.Snapshot()
		var w []float64
		for _, r := range runs {
			if r.End.Before(t0) {
				w = append(w, r.Rate["write"]/1e6)
			}
		}
		if len(w) == 0 {
			continue
		}
		slices.Sort(w)
		t.Logf("%s's own runs: %d, write %.1f to %.1f MB/s, median %.1f", d.Host, len(w), w[0], w[len(w)-1], alertstack.MedianOf(w))
	}
}

// faultServerDiskSlow is fault a: one data server's disk throttled to a
// tenth of its rate, the data its clients use on that server.
//
// MooseFS keeps one copy of each chunk here and stripes nothing, so a
// slow server slows only the files it holds. The test first pins every
// client's probe directory to the slow server, as a Lustre directory
// striped on one OST or a GPFS fileset placed in one pool would be (a
// file system whose clients' files are spread over the servers sees a
// slow server in that share of its runs). It then asserts:
//
//   - every client's writes fall (the chunkserver writes through to its
//     disk while throttled) and so do the slow server's own probes;
//   - PlateauFileSystemRegression fires and is notified, and the alert
//     Alertmanager holds names the slow server (its own daemon's
//     instance) and no other server as fallen;
//   - the nodes' pages (the clients' and the slow server's own, which
//     fire in Prometheus as the fault lasts) are held back by Alertmanager:
//     the on-call gets the one file-system page;
//   - no other alert fires: no PlateauServerSlow (no per-server targets
//     here), no page of a server that holds, no failing probe;
//   - after the throttle is lifted everything resolves.
func faultServerDiskSlow(t *testing.T, s *alertstack.Stack, c *mfscluster.Cluster, tl *alertstack.Timeline, probeDirs map[*alertstack.Daemon]string) {
	waitCalm(s, t, "fault a")
	slow, slowServer := c.ChunkServers[0], s.Servers[0]
	for i, d := range s.Daemons {
		// s.daemons[i] probes through c.Clients[i] (TestClusterFaults).
		pinProbeDir(t, c.Clients[i], filepath.Join(probeDirs[d], d.Host), slow)
	}
	pinnedAt := tl.Mark(t, "fault a: PINNED every client's probe directory to %s (label %s)", slow, slow.Label)
	// Two runs of every client after the pin: the calm rates the fault is
	// measured against are of writes to the server it slows.
	for _, d := range s.Daemons {
		first := d.Runs.FirstRunStartedAfter(t, "the pin of "+d.Host, pinnedAt, clusterInterval)
		d.Runs.FirstRunStartedAfter(t, "the pin of "+d.Host+", a second", first.End, clusterInterval)
	}
	requireSteady(s, t)
	aStart := time.Now()
	calmWrite := map[*alertstack.Daemon]float64{}
	for _, d := range append(slices.Clone(s.Daemons), s.Servers...) {
		calmWrite[d] = d.Runs.MedianRate("write", aStart)
	}
	logServerRuns(t, s, aStart)
	limit := int64(clusterDiskFaultFraction * clusterDiskRate)
	probeLimit := int64(clusterDiskFaultFraction * serverProbeRate)
	tl.Mark(t, "fault a: THROTTLED the disk of %s to a tenth: %.1f MB/s for the chunkserver, %.1f for its own probe", slow, float64(limit)/1e6, float64(probeLimit)/1e6)
	if err := slow.ThrottleDisk(limit); err != nil {
		t.Fatal(err)
	}
	if err := slowServer.Cgroup.Throttle(probeLimit); err != nil {
		t.Fatal(err)
	}
	// A run that started while the throttles were being set ran partly
	// unthrottled (one wrote at 0.82 of calm in CI, its slot 20ms before the
	// throttle landed): the bite is judged on runs that started after.
	throttled := time.Now()
	lifted := false
	lift := func() {
		if !lifted {
			lifted = true
			if err := slow.ThrottleDisk(0); err != nil {
				t.Error(err)
			}
			if err := slowServer.Cgroup.Throttle(serverProbeRate); err != nil {
				t.Error(err)
			}
		}
	}
	defer lift()

	// The throttle bites: every client's next write, and the server's own.
	for _, d := range append(slices.Clone(s.Daemons), slowServer) {
		interval := clusterInterval
		if d == slowServer {
			interval = serverInterval
		}
		run := d.Runs.FirstRunStartedAfter(t, "the throttle of "+slow.Name, throttled, interval)
		t.Logf("%s: first run of %s after the throttle: %s (calm write %.1f MB/s)", s.Since(run.End), d.Host, run, calmWrite[d]/1e6)
		if run.Rate["write"] >= 0.8*calmWrite[d] {
			s.Errorf(t, "the disk throttle of %s does not bite on %s: its first run after it wrote at %.1f MB/s, against %.1f MB/s calm", slow.Name, d.Host, run.Rate["write"]/1e6, calmWrite[d]/1e6)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Its filesystem label (checkFSAlert) holds back the servers' own
	// pages.
	fired := waitFSPage(s, t, tl, alertstack.Target, aStart)
	// The page is written when the clients' runs fall; the slow server is
	// named once its own run since the throttle has ended, which may come
	// after the first notification (Alertmanager's group_wait, shortened
	// here to 0.8s). It never names a server that holds.
	named := "Servers whose own probes of their devices fell at the same time: " + slowServer.Addr + fmt.Sprintf(" (of %d that probe their own)", len(s.Servers))
	holding := fmt.Sprintf("The %d servers that probe their own devices hold in their latest runs", len(s.Servers))
	firstDescription := strings.Join(strings.Fields(fired.Annotations["description"]), " ")
	firstNamed := strings.Contains(firstDescription, named)
	if !firstNamed && !strings.Contains(firstDescription, holding) {
		s.Errorf(t, "the first notification of %s names servers other than %s: %q", alertstack.FsRegressionAlert, slowServer.Host, firstDescription)
	}
	t.Logf("the first notification names %s: %t", slowServer.Host, firstNamed)

	// The alert Alertmanager holds names the slow server, and it alone:
	// its description is the latest Prometheus sent (resent every second).
	var held string
	s.WaitFor(t, "Alertmanager's "+alertstack.FsRegressionAlert+" to name "+slowServer.Host, 3*serverInterval+time.Minute, func() (bool, error) {
		am, err := s.AmAlerts(`alertname="` + alertstack.FsRegressionAlert + `"`)
		if err != nil || len(am) != 1 {
			return false, fmt.Errorf("Alertmanager holds %d %s (%v)", len(am), alertstack.FsRegressionAlert, err)
		}
		held = strings.Join(strings.Fields(am[0].Annotations["description"]), " ")
		return strings.Contains(held, named), fmt.Errorf("its description: %q", held)
	})
	tl.Mark(t, "NAMED: Alertmanager's %s names %s (first notification named it: %t)", alertstack.FsRegressionAlert, slowServer.Host, firstNamed)

	// Held until the pages of the nodes that fell would have notified:
	// the slow server's own page fires in Prometheus, and Alertmanager
	// holds it back, as it holds the clients' pages.
	s.WaitFor(t, alertstack.RegressionAlert+" of "+slowServer.Host+" to fire, inhibited", 3*time.Minute, func() (bool, error) {
		am, err := s.AmAlerts(`alertname="` + alertstack.RegressionAlert + `"`)
		if err != nil {
			return false, err
		}
		for _, a := range am {
			if a.Labels["instance"] == slowServer.Addr {
				if len(a.Status.InhibitedBy) == 0 {
					return false, fmt.Errorf("Alertmanager holds %s of %s, not inhibited (%s)", alertstack.RegressionAlert, slowServer.Host, a.Status.State)
				}
				return a.Labels["filesystem"] == alertstack.Target, fmt.Errorf("its filesystem label is %q", a.Labels["filesystem"])
			}
		}
		return false, fmt.Errorf("Alertmanager holds no %s of %s", alertstack.RegressionAlert, slowServer.Host)
	})
	clientPages, err := s.Prom.CountOverRange(`ALERTS{alertname="`+alertstack.RegressionAlert+`",alertstate="firing",job="`+alertstack.Job+`"}`, aStart)
	if err != nil {
		t.Fatal(err)
	}
	tl.Mark(t, "HELD BACK: %s's own page and %d client pages fired in Prometheus; Alertmanager inhibits them", slowServer.Host, len(clientPages))

	aLift := tl.Mark(t, "LIFTED the disk throttle of %s", slow.Name)
	lift()
	waitResolved(s, t, tl, fired, aLift)

	// What fired: the file-system page, and the pages of nodes that fell
	// (the clients' and the slow server's); nothing else, on no server
	// that holds.
	checkNoAlert(s, t, aStart, `ALERTS{alertname!~"`+alertstack.FsRegressionAlert+`|`+alertstack.RegressionAlert+`"}`, "with one server's disk throttled")
	checkNoAlert(s, t, aStart, `ALERTS{job="`+alertstack.ServerJob+`",instance!="`+slowServer.Addr+`"}`, "on the servers that hold")
	checkNotifiedOnly(s, t, "a", aStart, isFSPageOf(alertstack.Target), "the file-system page")
	s.LogOverlaps(t, aStart, time.Now())
}
