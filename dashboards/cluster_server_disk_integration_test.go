//go:build integration

package dashboards

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

const (
	// serverJob is the job the storage servers' own daemons are scraped
	// as, apart from the clients', as a site scrapes its servers.
	serverJob = "plateau-servers"
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
func startServerDaemons(t *testing.T, s *alertStack, c *mfscluster.Cluster) {
	t.Helper()
	o := s.opts
	o.interval, o.timeout, o.fileSize = serverInterval, serverTimeout, serverFileSize
	baselines := filepath.Join(s.dir, "server-baselines.yml")
	for _, cs := range c.ChunkServers {
		dir := filepath.Join(cs.Disk.Mount, "plateau")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cg := probetest.NewIOCgroup(t, cs.Disk.DevNum)
		if err := cg.Throttle(serverProbeRate); err != nil {
			t.Fatal(err)
		}
		d := &stackDaemon{host: cs.Name, cgroup: cg, configFile: filepath.Join(s.dir, cs.Name+".yml")}
		writeTargetConfig(t, d.configFile, o, baselines, exporterTarget{name: serverTarget, path: dir, serves: stackTarget})
		s.servers = append(s.servers, d)
	}
	first := s.servers[0]
	s.runCharacterize(t, inCgroup(first.cgroup), first.configFile, first.host)
	b, err := plateau.LoadBaselines(baselines)
	if err != nil {
		t.Fatalf("reading the servers' characterized baselines: %v", err)
	}
	for _, op := range []string{"write", "read"} {
		e := b.Entries[plateau.BaselineKey{Target: serverTarget, Probe: stackProbe, Op: op}]
		if e == nil || e.Unit != probe.UnitBytesPerSecond {
			t.Fatalf("the servers' baselines have no %s throughput: %+v", op, e)
		}
		// The device's rate must be what sets the plateau, or a tenth of
		// it would not mean what the test says.
		if e.Value < 0.8*serverProbeRate || e.Value > 1.3*serverProbeRate {
			t.Fatalf("characterized the servers' %s at %.0f MB/s on devices of %.0f MB/s: the device does not set the plateau", op, e.Value/1e6, serverProbeRate/1e6)
		}
	}
	for _, d := range s.servers {
		s.startExporter(t, d, inCgroup(d.cgroup))
	}
	for _, d := range s.servers {
		waitReady(t, d.proc, d.url+"/-/healthy")
		pids, err := d.cgroup.Pids()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pids, d.proc.cmd.Process.Pid) {
			t.Fatalf("server daemon %s (pid %d) is not in its cgroup %s (its processes: %v)", d.host, d.proc.cmd.Process.Pid, d.cgroup, pids)
		}
		d.runs = watchTargetRuns(t, d.url+"/metrics", serverTarget, serverInterval/10)
		t.Logf("%s: plateau_exporter at %s probes its own disk under %s (serves %s)", d.host, d.addr, serverTarget, stackTarget)
	}
}

// logServerRuns logs the spread of each server's own runs before t0: the
// steadiness its low score is measured against.
func logServerRuns(t *testing.T, s *alertStack, t0 time.Time) {
	t.Helper()
	for _, d := range s.servers {
		runs, _ := d.runs.snapshot()
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
		t.Logf("%s's own runs: %d, write %.1f to %.1f MB/s, median %.1f", d.host, len(w), w[0], w[len(w)-1], medianOf(w))
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
func faultServerDiskSlow(t *testing.T, s *alertStack, c *mfscluster.Cluster, tl *timeline, probeDirs map[*stackDaemon]string) {
	s.waitCalm(t, "fault a")
	slow, slowServer := c.ChunkServers[0], s.servers[0]
	for i, d := range s.daemons {
		// s.daemons[i] probes through c.Clients[i] (TestClusterFaults).
		pinProbeDir(t, c.Clients[i], filepath.Join(probeDirs[d], d.host), slow)
	}
	pinnedAt := tl.mark(t, "fault a: PINNED every client's probe directory to %s (label %s)", slow, slow.Label)
	// Two runs of every client after the pin: the calm rates the fault is
	// measured against are of writes to the server it slows.
	for _, d := range s.daemons {
		first := d.runs.firstRunStartedAfter(t, "the pin of "+d.host, pinnedAt, clusterInterval)
		d.runs.firstRunStartedAfter(t, "the pin of "+d.host+", a second", first.End, clusterInterval)
	}
	s.requireSteady(t)
	aStart := time.Now()
	calmWrite := map[*stackDaemon]float64{}
	for _, d := range append(slices.Clone(s.daemons), s.servers...) {
		calmWrite[d] = d.runs.medianRate("write", aStart)
	}
	logServerRuns(t, s, aStart)
	limit := int64(clusterDiskFaultFraction * clusterDiskRate)
	probeLimit := int64(clusterDiskFaultFraction * serverProbeRate)
	tl.mark(t, "fault a: THROTTLED the disk of %s to a tenth: %.1f MB/s for the chunkserver, %.1f for its own probe", slow, float64(limit)/1e6, float64(probeLimit)/1e6)
	if err := slow.ThrottleDisk(limit); err != nil {
		t.Fatal(err)
	}
	if err := slowServer.cgroup.Throttle(probeLimit); err != nil {
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
			if err := slowServer.cgroup.Throttle(serverProbeRate); err != nil {
				t.Error(err)
			}
		}
	}
	defer lift()

	// The throttle bites: every client's next write, and the server's own.
	for _, d := range append(slices.Clone(s.daemons), slowServer) {
		interval := clusterInterval
		if d == slowServer {
			interval = serverInterval
		}
		run := d.runs.firstRunStartedAfter(t, "the throttle of "+slow.Name, throttled, interval)
		t.Logf("%s: first run of %s after the throttle: %s (calm write %.1f MB/s)", s.since(run.End), d.host, run, calmWrite[d]/1e6)
		if run.Rate["write"] >= 0.8*calmWrite[d] {
			t.Errorf("the disk throttle of %s does not bite on %s: its first run after it wrote at %.1f MB/s, against %.1f MB/s calm", slow.Name, d.host, run.Rate["write"]/1e6, calmWrite[d]/1e6)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Its filesystem label (checkFSAlert) holds back the servers' own
	// pages.
	fired := s.waitFSPage(t, tl, stackTarget, aStart)
	// The page is written when the clients' runs fall; the slow server is
	// named once its own run since the throttle has ended, which may come
	// after the first notification (Alertmanager's group_wait, shortened
	// here to 0.8s). It never names a server that holds.
	named := "Servers whose own probes of their devices fell at the same time: " + slowServer.addr + fmt.Sprintf(" (of %d that probe their own)", len(s.servers))
	holding := fmt.Sprintf("The %d servers that probe their own devices hold in their latest runs", len(s.servers))
	firstDescription := strings.Join(strings.Fields(fired.Annotations["description"]), " ")
	firstNamed := strings.Contains(firstDescription, named)
	if !firstNamed && !strings.Contains(firstDescription, holding) {
		t.Errorf("the first notification of %s names servers other than %s: %q", fsRegressionAlert, slowServer.host, firstDescription)
	}
	t.Logf("the first notification names %s: %t", slowServer.host, firstNamed)

	// The alert Alertmanager holds names the slow server, and it alone:
	// its description is the latest Prometheus sent (resent every second).
	var held string
	waitFor(t, "Alertmanager's "+fsRegressionAlert+" to name "+slowServer.host, 3*serverInterval+time.Minute, func() (bool, error) {
		am, err := s.amAlerts(`alertname="` + fsRegressionAlert + `"`)
		if err != nil || len(am) != 1 {
			return false, fmt.Errorf("Alertmanager holds %d %s (%v)", len(am), fsRegressionAlert, err)
		}
		held = strings.Join(strings.Fields(am[0].Annotations["description"]), " ")
		return strings.Contains(held, named), fmt.Errorf("its description: %q", held)
	})
	tl.mark(t, "NAMED: Alertmanager's %s names %s (first notification named it: %t)", fsRegressionAlert, slowServer.host, firstNamed)

	// Held until the pages of the nodes that fell would have notified:
	// the slow server's own page fires in Prometheus, and Alertmanager
	// holds it back, as it holds the clients' pages.
	waitFor(t, regressionAlert+" of "+slowServer.host+" to fire, inhibited", 3*time.Minute, func() (bool, error) {
		am, err := s.amAlerts(`alertname="` + regressionAlert + `"`)
		if err != nil {
			return false, err
		}
		for _, a := range am {
			if a.Labels["instance"] == slowServer.addr {
				if len(a.Status.InhibitedBy) == 0 {
					return false, fmt.Errorf("Alertmanager holds %s of %s, not inhibited (%s)", regressionAlert, slowServer.host, a.Status.State)
				}
				return a.Labels["filesystem"] == stackTarget, fmt.Errorf("its filesystem label is %q", a.Labels["filesystem"])
			}
		}
		return false, fmt.Errorf("Alertmanager holds no %s of %s", regressionAlert, slowServer.host)
	})
	clientPages, err := s.prom.countOverRange(`ALERTS{alertname="`+regressionAlert+`",alertstate="firing",job="`+stackJob+`"}`, aStart)
	if err != nil {
		t.Fatal(err)
	}
	tl.mark(t, "HELD BACK: %s's own page and %d client pages fired in Prometheus; Alertmanager inhibits them", slowServer.host, len(clientPages))

	aLift := tl.mark(t, "LIFTED the disk throttle of %s", slow.Name)
	lift()
	s.waitResolved(t, tl, fired, aLift)

	// What fired: the file-system page, and the pages of nodes that fell
	// (the clients' and the slow server's); nothing else, on no server
	// that holds.
	s.checkNoAlert(t, aStart, `ALERTS{alertname!~"`+fsRegressionAlert+`|`+regressionAlert+`"}`, "with one server's disk throttled")
	s.checkNoAlert(t, aStart, `ALERTS{job="`+serverJob+`",instance!="`+slowServer.addr+`"}`, "on the servers that hold")
	s.checkNotifiedOnly(t, "a", aStart, isFSPageOf(stackTarget), "the file-system page")
	s.logOverlaps(t, aStart, time.Now())
}
