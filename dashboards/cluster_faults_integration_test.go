//go:build integration

package dashboards

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"

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
	// test writes ~250 runs x 8 MiB, one copy each (goal 1 on the probe
	// directory): 2 GiB, against 3 x (4 GiB - 256 MiB) of chunk space;
	// the loop files are sparse in RAM, so only what is written costs
	// memory.
	clusterDiskSize = 4 << 30

	// clusterMinFree is the target's min_free_ratio: the calm runs and
	// their leak keep the file system ~80% free, and fault f fills it to
	// clusterFillTo, well under it, by allocating space on the
	// chunkservers' own disks.
	clusterMinFree = 0.5
	clusterFillTo  = 0.35

	// clusterMetaProbe is a metadata probe of empty files, which writes no
	// data and so runs on a file system under its min_free_ratio. It joins
	// the config (a reload) only for fault f, which asserts that it runs,
	// not what it measures: on this shared two-core machine its 32 files
	// take 26-44ms through the master, characterize measured its ops at
	// ±26% (create) and ±64% (stat), and with it configured from the start
	// its verdicts paged four times in 30 calm rounds (PlateauProbeRegression
	// of three nodes, PlateauFileSystemRegression, and
	// PlateauProbeBelowPlateau of all four) while the data probe of the
	// same runs stayed within 0.93-1.01 of its baseline.
	clusterMetaProbe = "md"
)

// TestClusterFaults deploys the product on a real MooseFS cluster: a
// master, three chunkservers on RAM-backed loop devices, and four client
// hosts, each in its own network namespace with its link shaped to
// clusterLink; one plateau_exporter per client probing its mount under one
// target name (so the fleet rules see the clients as peers), one
// Prometheus with the shipped rules, one Alertmanager with the shipped
// route and inhibitions. Each fault starts from a steady state and
// asserts the absence of every alert it should not raise.
//
//   - (g) 30 rounds with no fault: no alert of any kind fires, nothing is
//     notified.
//   - (b) one client's link throttled to 30% of its read rate: that node's
//     PlateauProbeRegression page only, no PlateauFileSystemRegression,
//     the notification naming the node (instance); resolved after the
//     throttle is lifted.
//   - (f) the file system filled under the target's min_free_ratio: the
//     data probe skips on every node with reason min_free in
//     plateau_probe_skips_total, the metadata probe goes on, no page (the
//     one alert allowed is PlateauProbeNotRun, the warning that says the
//     data probe does not run), no probe file left; after the space is
//     freed the data probe runs again and every alert resolves.
func TestClusterFaults(t *testing.T) {
	promBin, amBin := requireAlertingPrereqs(t)
	c := mfscluster.Start(t, mfscluster.Options{ChunkServers: 3, Clients: clusterClients, DiskSize: clusterDiskSize})
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
		},
		dir: t.TempDir(),
	}
	s.buildExporter(t)

	// The probes' directory: trash time 0 and one copy per chunk, set
	// before anything is created in it so every probe directory and file
	// inherits them.
	root := filepath.Join(c.Clients[0].Mount, "plateau")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{{"mfssettrashtime", "-r", "0", root}, {"mfssetgoal", "-r", "1", root}} {
		if _, err := c.Clients[0].Run(argv[0], argv[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, argv := range [][]string{{"mfsgettrashtime", root}, {"mfsgetgoal", root}} {
		out, err := c.Clients[0].Run(argv[0], argv[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s", out)
	}
	baselines := filepath.Join(s.dir, "baselines.yml")
	for i, h := range hosts {
		cl := c.Clients[i]
		// Each client probes a directory of its own, through its own
		// mount, under the one target name.
		dir := filepath.Join(cl.Mount, "plateau", h)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		d := &stackDaemon{host: h, configFile: filepath.Join(s.dir, h+".yml")}
		writeClusterConfig(t, d.configFile, s.opts, dir, baselines, false)
		if err := cl.ThrottleNetwork(clusterLink); err != nil {
			t.Fatal(err)
		}
		s.daemons = append(s.daemons, d)
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
	s.startMonitoring(t, promBin, amBin)
	tl := s.watchAlerts(t)
	logSpace(t, c, "at the start")
	t.Cleanup(func() { logSpace(t, c, "at the end") })

	// Fault g: calm.
	tl.mark(t, "fault g: %d rounds with no fault", clusterCalmRounds)
	waitFor(t, fmt.Sprintf("%d rounds of runs", clusterCalmRounds), clusterCalmRounds*3*clusterInterval+2*time.Minute, func() (bool, error) {
		return s.rounds() >= clusterCalmRounds, s.failedRuns()
	})
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
	for _, a := range s.hook.received() {
		t.Errorf("fault g: the webhook received %s %s at %s", a.Status, s.alertKey(a.Labels), s.since(a.At))
	}
	if t.Failed() {
		t.FailNow()
	}
	logSpace(t, c, "after fault g")

	// Fault b: one client's network.
	s.requireSteady(t)
	victim := s.daemons[1]
	vc := clientOf(victim)
	limit := int64(clusterFaultFraction * medianRead[victim])
	bStart := tl.mark(t, "fault b: THROTTLED the link of %s (%s) to %.1f MB/s, 30%% of its calm read %.1f MB/s", victim.host, vc, float64(limit)/1e6, medianRead[victim]/1e6)
	if err := vc.ThrottleNetwork(limit); err != nil {
		t.Fatal(err)
	}
	run := victim.runs.firstRunStartedAfter(t, "the throttle of "+victim.host, bStart, clusterInterval)
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
	for _, a := range s.hook.received() {
		if !a.At.Before(bStart) && !isVictimPage(a) {
			t.Errorf("fault b: the webhook received %s %s at %s; only %s's page was expected", a.Status, s.alertKey(a.Labels), s.since(a.At), victim.host)
		}
	}
	s.logOverlaps(t, bStart, time.Now())
	logSpace(t, c, "after fault b")
	if t.Failed() {
		t.FailNow()
	}

	// Fault f: a full file system. It starts once fault b has left the
	// victim's statistic: its recent runs, which the verdict averages,
	// must all be after the lift (a run read at 0.73 of its baseline
	// just after it once left a verdict that the skips of fault f then
	// held until it paged).
	s.waitSteady(t, "after fault b", bLift, 4)
	fStart := tl.mark(t, "fault f: RELOADED every daemon with a metadata probe %s added", clusterMetaProbe)
	for i, d := range s.daemons {
		writeClusterConfig(t, d.configFile, s.opts, filepath.Join(c.Clients[i].Mount, "plateau", d.host), baselines, true)
		if err := d.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every daemon to run its metadata probe, reloaded into its config", time.Minute, func() (bool, error) {
		var none []string
		for _, d := range s.daemons {
			if v, _ := scrapeValue(t, d.url+"/metrics", "plateau_probe_runs_total", map[string]string{"target": stackTarget, "probe": clusterMetaProbe, "result": "success"}); v < 1 {
				none = append(none, d.host)
			}
		}
		return len(none) == 0, fmt.Errorf("no metadata run yet on %v", none)
	})
	tl.mark(t, "every daemon runs %s too", clusterMetaProbe)
	s.waitSteady(t, "after the reload", fStart, 3)
	fillers := fillCluster(t, c, clusterFillTo)
	tl.mark(t, "fault f: FILLED the chunkservers' disks (%s) until the mounts are under %.0f%% free", strings.Join(fillers, ", "), 100*clusterFillTo)
	skips := func(d *stackDaemon, probe, reason string) float64 {
		v, _ := scrapeValue(t, d.url+"/metrics", "plateau_probe_skips_total", map[string]string{"target": stackTarget, "probe": probe, "reason": reason})
		return v
	}
	successes := func(d *stackDaemon, probe string) float64 {
		v, _ := scrapeValue(t, d.url+"/metrics", "plateau_probe_runs_total", map[string]string{"target": stackTarget, "probe": probe, "result": "success"})
		return v
	}
	skips0, md0, seq0 := map[*stackDaemon]float64{}, map[*stackDaemon]float64{}, map[*stackDaemon]float64{}
	for _, d := range s.daemons {
		skips0[d], md0[d], seq0[d] = skips(d, stackProbe, "min_free"), successes(d, clusterMetaProbe), successes(d, stackProbe)
	}
	// Three slots of each daemon under the min_free_ratio, at most one
	// run of the data probe in flight when the space went.
	waitFor(t, "every daemon to skip its data probe 3 times for min_free and run its metadata probe 3 times", 2*time.Minute, func() (bool, error) {
		var behind []string
		for _, d := range s.daemons {
			sk, md := skips(d, stackProbe, "min_free")-skips0[d], successes(d, clusterMetaProbe)-md0[d]
			if sk < 3 || md < 3 {
				behind = append(behind, fmt.Sprintf("%s: %.0f skips, %.0f metadata runs", d.host, sk, md))
			}
		}
		return len(behind) == 0, fmt.Errorf("%s", strings.Join(behind, "; "))
	})
	for _, d := range s.daemons {
		if n := successes(d, stackProbe) - seq0[d]; n > 1 {
			t.Errorf("%s: the data probe ran %.0f times under the min_free_ratio", d.host, n)
		}
		t.Logf("%s under min_free_ratio: %.0f min_free skips of %s, %.0f successful %s runs", d.host,
			skips(d, stackProbe, "min_free")-skips0[d], stackProbe, successes(d, clusterMetaProbe)-md0[d], clusterMetaProbe)
	}
	// No probe file left: each probe directory holds its lock file and,
	// at most, the run directory of a metadata run in flight, which goes
	// within the run.
	for i, d := range s.daemons {
		probeDir := filepath.Join(c.Clients[i].Mount, "plateau", d.host, d.host)
		var left []string
		waitFor(t, "no probe file left in "+probeDir, 2*clusterInterval, func() (bool, error) {
			left = left[:0]
			err := filepath.WalkDir(probeDir, func(path string, e os.DirEntry, err error) error {
				if err != nil || path == probeDir || e.Name() == ".lock" {
					return nil
				}
				left = append(left, strings.TrimPrefix(path, probeDir+"/"))
				return nil
			})
			return len(left) == 0, fmt.Errorf("left %v (%v)", left, err)
		})
	}
	// The metadata probe leaves before it has the runs for a verdict of
	// its own (minChangeRuns): its verdicts on this machine are noise
	// (see clusterMetaProbe), and once its statistic appeared during a
	// slow recovery of the space they paged (run 3 of 55f47e9, with every
	// data run at 0.97-1.01).
	for i, d := range s.daemons {
		if v, ok := scrapeValue(t, d.url+"/metrics", "plateau_probe_change_ratio", map[string]string{"target": stackTarget, "probe": clusterMetaProbe}); ok {
			t.Fatalf("%s: the metadata probe has a change ratio (%g) already: the fault lasted too long", d.host, v)
		}
		writeClusterConfig(t, d.configFile, s.opts, filepath.Join(c.Clients[i].Mount, "plateau", d.host), baselines, false)
		if err := d.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every daemon to drop its metadata probe", time.Minute, func() (bool, error) {
		var still []string
		for _, d := range s.daemons {
			if _, ok := scrapeValue(t, d.url+"/metrics", "plateau_probe_runs_total", map[string]string{"target": stackTarget, "probe": clusterMetaProbe}); ok {
				still = append(still, d.host)
			}
		}
		return len(still) == 0, fmt.Errorf("still running %s: %v", clusterMetaProbe, still)
	})
	fLift := tl.mark(t, "FREED the chunkservers' disks (metadata probe removed)")
	for _, f := range fillers {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range s.daemons {
		d.runs.firstRunStartedAfter(t, "the space was freed on "+d.host, fLift, clusterInterval)
	}
	waitFor(t, "every alert of fault f to resolve", 2*time.Minute, func() (bool, error) {
		held, err := s.prom.alerts()
		if err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus holds %d alerts (%v)", len(held), err)
		}
		return allResolved(s.hook.received())
	})
	tl.mark(t, "RECOVERED: every daemon ran its data probe again and no alert is held, %s after the space was freed", time.Since(fLift).Round(time.Second))
	s.checkNoAlert(t, fStart, `ALERTS{alertname!="PlateauProbeNotRun"}`, "with the file system full")
	s.checkNoAlert(t, fStart, `ALERTS{severity="critical"}`, "with the file system full")
	for _, a := range s.hook.received() {
		if !a.At.Before(fStart) && a.Labels["severity"] == "critical" {
			t.Errorf("fault f: the webhook received a page: %s %s at %s", a.Status, s.alertKey(a.Labels), s.since(a.At))
		}
	}
	notRun, err := s.prom.countOverRange(`ALERTS{alertname="PlateauProbeNotRun",alertstate="firing"}`, fStart)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fault f: PlateauProbeNotRun fired for %d of %d nodes", len(notRun), len(s.daemons))
	logSpace(t, c, "after fault f")
}

// writeClusterConfig writes a client's config: the stack's data probe and
// a metadata probe of empty files on one target with a min_free_ratio.
func writeClusterConfig(t *testing.T, path string, o stackOptions, targetPath, baselines string, withMeta bool) {
	t.Helper()
	meta := ""
	if withMeta {
		meta = fmt.Sprintf("      - {name: %s, kind: metadata, workers: 1, files: 32, file_size: 0}\n", clusterMetaProbe)
	}
	cfg := fmt.Sprintf(`defaults:
  interval: %s
  timeout: %s
  splay: %t
targets:
  - name: %s
    path: %s
    min_free_ratio: %g
    probes:
      - {name: %s, kind: sequential, workers: 1, file_size: %s, block_size: %s}
%sbaselines_file: %s
`, o.interval, o.timeout, o.splay, stackTarget, targetPath, clusterMinFree, stackProbe, formatSize(o.fileSize), formatSize(blockSize), meta, baselines)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fillCluster allocates a file on each chunkserver's own disk, beside its
// chunks, so that the space the master counts falls until a client's
// mount is under ratio free, and returns the files (removing them frees
// the space). fallocate writes nothing: the loop files stay sparse.
func fillCluster(t *testing.T, c *mfscluster.Cluster, ratio float64) []string {
	t.Helper()
	mnt := c.Clients[0].Mount
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	total, avail := int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	// A tenth of the total more than the ratio asks: the chunkservers
	// round their space, and the skip must not depend on it.
	fill := avail - int64((ratio-0.1)*float64(total))
	if fill <= 0 {
		t.Fatalf("%s is %.0f%% free already", mnt, 100*float64(avail)/float64(total))
	}
	var files []string
	each := fill / int64(len(c.ChunkServers))
	for _, cs := range c.ChunkServers {
		var ds unix.Statfs_t
		if err := unix.Statfs(cs.Disk.Mount, &ds); err != nil {
			t.Fatal(err)
		}
		n := min(each, int64(ds.Bavail)*ds.Bsize-320<<20)
		f := filepath.Join(cs.Disk.Mount, "filler")
		fh, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Fallocate(int(fh.Fd()), 0, 0, n)
		fh.Close()
		if err != nil {
			t.Fatalf("fallocate %d MiB on %s: %v", n>>20, cs, err)
		}
		t.Cleanup(func() { os.Remove(f) })
		files = append(files, f)
	}
	waitFor(t, fmt.Sprintf("%s to be under %.0f%% free", mnt, 100*ratio), time.Minute, func() (bool, error) {
		free := statfsFree(t, mnt)
		return free < ratio, fmt.Errorf("%.1f%% free", 100*free)
	})
	t.Logf("%s: %.1f%% free after allocating %d MiB on each chunkserver's disk", mnt, 100*statfsFree(t, mnt), each>>20)
	return files
}

// statfsFree is the share of a file system's space that is available.
func statfsFree(t *testing.T, path string) float64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return float64(st.Bavail) / float64(st.Blocks)
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

// waitSteady waits for a steady state after since: every daemon has
// completed runs runs of its data probe that started after since, no
// node's verdict is in regression, and neither Prometheus nor
// Alertmanager holds an alert.
func (s *alertStack) waitSteady(t *testing.T, what string, since time.Time, runs int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a steady state %s (%d runs of every daemon, no regression verdict, no alert)", what, runs), time.Duration(runs+6)*s.opts.interval+time.Minute, func() (bool, error) {
		for _, d := range s.daemons {
			rs, err := d.runs.snapshot()
			n := 0
			for _, r := range rs {
				if r.Start().After(since) {
					n++
				}
			}
			if n < runs {
				return false, fmt.Errorf("%s: %d runs since (%v)", d.host, n, err)
			}
		}
		if v, err := s.prom.query(`plateau_probe_target_regression == 1`); err != nil || len(v) > 0 {
			return false, fmt.Errorf("%d nodes in regression (%v)", len(v), err)
		}
		held, err := s.prom.alerts()
		if err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus holds %d alerts (%v)", len(held), err)
		}
		am, err := s.amAlerts("")
		if err != nil || len(am) > 0 {
			return false, fmt.Errorf("Alertmanager holds %d alerts (%v)", len(am), err)
		}
		return true, nil
	})
	t.Logf("%s: steady %s", s.since(time.Now()), what)
}

// failedRuns says why the daemons' probes fail, if any does: a full file
// system or a hung mount shows here long before a deadline.
func (s *alertStack) failedRuns() error {
	got, err := s.prom.query(`sum by (instance, reason) (increase(plateau_probe_errors_total[1m])) > 0`)
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

// scrapeValue reads one sample of a daemon's /metrics, a counter's or a
// gauge's value, matched by name and labels.
func scrapeValue(t *testing.T, metricsURL, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	body, err := httpGet(metricsURL)
	if err != nil {
		t.Logf("scraping %s: %v", metricsURL, err)
		return 0, false
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing %s: %v", metricsURL, err)
	}
	f := fams[name]
	if f == nil {
		return 0, false
	}
metrics:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue metrics
			}
		}
		if c := m.GetCounter(); c != nil {
			return c.GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}
