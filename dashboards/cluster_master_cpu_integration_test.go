//go:build integration

package dashboards

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

const (
	// metadataTarget is the clients' second target: a metadata probe of
	// the same mount, apart from the data probe's target so that a
	// metadata fault pages as the file system's metadata, by name.
	//
	// It has no characterized plateau. The probe is bound by CPU here
	// (every op a FUSE round trip, and all but stats through the master)
	// and every host of this cluster shares the machine's two cores, so
	// what characterize measures is the machine's load of the moment,
	// not a property of the cluster: characterized before the daemons
	// started, the calm runs read 0.65 to 0.93 of it and
	// PlateauProbeBelowPlateau warned; characterized beside the running
	// daemons, stats came out at 6,600/s in one test run and 19,300/s in
	// the next. The file-system page and the nodes' pages read each
	// node's own recent normal (the low score and the change statistic),
	// which need no plateau; only PlateauProbeBelowPlateau does, and it
	// stays silent for a probe without one.
	metadataTarget = "loop-metadata"
	// metadataFiles is its probe's size: about 0.6s a run through a
	// client here (creates ~2,300/s, stats ~6,500/s, reads and removes
	// ~3,000/s), long enough that one op's phase is not a
	// scheduler's tick (64 files, ~30ms runs, paged four times in 30
	// calm rounds when this cluster first tried them). Every file a run
	// removes stays "sustained" in the master for as long as the mount
	// lives (see clusterDiskSize), so each run adds that many to its
	// metadata: 1000 a run grew it from 26,000 to 103,000 files in the
	// calm.
	metadataFiles = 500
	// metadataScoreRuns is how many metadata runs each client makes
	// before fault c: the low score's first (plateau.MinNormalRuns runs of
	// normal, and the one it scores).
	metadataScoreRuns = plateau.MinNormalRuns + 1

	// metadataRunTime and dataRunTime are how long a client's metadata
	// and data runs take here, with room: metadataProbeName keeps the
	// metadata runs of different clients, and a client's two probes,
	// from meeting.
	metadataRunTime = 900 * time.Millisecond
	dataRunTime     = 1400 * time.Millisecond

	// masterCPUFraction is fault c: the master held to 15% of one CPU.
	// Alone, a client's creates and removes fell to about half their
	// rate (1,200 to 1,550 creates a second against 2,300 to 2,700), its
	// 8 MiB writes, a handful of master requests each, by at most 3%. At
	// 10%, creates fell to 0.35 to 0.40 and removes to 0.1, and the runs
	// took 2.8 to 3.0s, or more than the 5s timeout in one test run of
	// two: then PlateauProbeFailing warned, truthfully, and the page, fed
	// by successful runs only, resolved while the master was still slow.
	masterCPUFraction = 0.15
)

// metadataProbeName names the clients' metadata probe so that its slots
// (schedule.SlotOffset of host, metadataTarget and the name) keep the
// clients' metadata runs apart from one another and from each client's
// own data run, whose packets would queue its metadata requests behind
// them on its shaped link: of the names md, md1, md2 ..., the first
// whose runs, each metadataRunTime long, leave the widest room.
func metadataProbeName(t *testing.T, hosts []string, interval time.Duration) string {
	t.Helper()
	circular := func(d time.Duration) time.Duration { return ((d % interval) + interval) % interval }
	best, bestRoom := "", time.Duration(math.MinInt64)
	for i := 0; i < 1000; i++ {
		name := "md"
		if i > 0 {
			name = fmt.Sprintf("md%d", i)
		}
		room := interval
		for a, h := range hosts {
			m := schedule.SlotOffset(h, metadataTarget, name, interval)
			// From the end of the host's data run to the start of its
			// metadata run, and from the end of that to the next data run.
			data := schedule.SlotOffset(h, stackTarget, stackProbe, interval)
			room = min(room, circular(m-data)-dataRunTime, circular(data-m)-metadataRunTime)
			for _, other := range hosts[a+1:] {
				o := schedule.SlotOffset(other, metadataTarget, name, interval)
				room = min(room, circular(o-m)-metadataRunTime, circular(m-o)-metadataRunTime)
			}
		}
		if room > bestRoom {
			best, bestRoom = name, room
		}
		if bestRoom >= 200*time.Millisecond {
			break
		}
	}
	if bestRoom < 0 {
		t.Fatalf("no metadata probe name keeps the runs of %v apart over %s (best %s, %s short)", hosts, interval, best, -bestRoom)
	}
	var slots []string
	for _, h := range hosts {
		slots = append(slots, fmt.Sprintf("%s at %s (data at %s)", h,
			schedule.SlotOffset(h, metadataTarget, best, interval).Round(time.Millisecond),
			schedule.SlotOffset(h, stackTarget, stackProbe, interval).Round(time.Millisecond)))
	}
	t.Logf("metadata probe %q: %s; %s of room around each run", best, strings.Join(slots, ", "), bestRoom.Round(time.Millisecond))
	return best
}

// metadataTargetOf is a client's metadata target: a directory of its own
// beside its data probe's, through the same mount.
func metadataTargetOf(dataDir, probeName string) exporterTarget {
	return exporterTarget{name: metadataTarget, path: dataDir + "-metadata", metadataProbe: probeName, metadataFiles: metadataFiles}
}

// faultMasterCPU is fault c: the metadata server (the MooseFS master, as
// GPFS's manager nodes or Lustre's MDS) held to 15% of one CPU. Every
// client's metadata probe slows; its data probe, a handful of master
// requests a run, does not. It asserts:
//
//   - every client's next metadata run falls (creates and removes under
//     0.75 of their calm rate);
//   - PlateauFileSystemRegression fires for the metadata target, as one
//     page with no instance, and is notified; it names no server (none
//     serves that target);
//   - the clients' own pages of the metadata target, if they fire in
//     Prometheus, are held back;
//   - no alert of the data target or of the servers, nor of any other
//     name, fires;
//   - after the throttle is lifted everything resolves: one firing and
//     one resolved notification in all.
func faultMasterCPU(t *testing.T, s *alertStack, c *mfscluster.Cluster, tl *timeline) {
	s.waitCalm(t, "fault c")
	cStart := time.Now()
	calm := map[*stackDaemon]map[string]float64{}
	calmWrite := map[*stackDaemon]float64{}
	for _, d := range s.daemons {
		calm[d] = map[string]float64{}
		for _, op := range []string{"create", "stat", "read", "remove"} {
			calm[d][op] = d.metadataRuns.medianRate(op, cStart)
		}
		calmWrite[d] = d.runs.medianRate("write", cStart)
		t.Logf("%s calm metadata: %.0f creates/s, %.0f stats/s, %.0f reads/s, %.0f removes/s", d.host, calm[d]["create"], calm[d]["stat"], calm[d]["read"], calm[d]["remove"])
	}
	tl.mark(t, "fault c: THROTTLED the master (%s) to %g of one CPU", c.Master, masterCPUFraction)
	if err := c.Master.ThrottleCPU(masterCPUFraction); err != nil {
		t.Fatal(err)
	}
	lifted := false
	lift := func() {
		if !lifted {
			lifted = true
			if err := c.Master.ThrottleCPU(0); err != nil {
				t.Error(err)
			}
		}
	}
	defer lift()

	// The throttle bites on the metadata runs, not on the data runs.
	for _, d := range s.daemons {
		run := d.metadataRuns.firstRunStartedAfter(t, "the master's throttle", cStart, clusterInterval)
		t.Logf("%s: first metadata run of %s after the throttle: %s", s.since(run.End), d.host, run)
		for _, op := range []string{"create", "remove"} {
			if run.Rate[op] >= 0.75*calm[d][op] {
				t.Errorf("the master's throttle does not bite on %s: its first metadata run after it did %.0f %ss/s, against %.0f calm", d.host, run.Rate[op], op, calm[d][op])
			}
		}
		data := d.runs.firstRunStartedAfter(t, "the master's throttle", cStart, clusterInterval)
		t.Logf("%s: first data run of %s after the throttle: %s (write %.2f of its calm median)", s.since(data.End), d.host, data, data.Rate["write"]/calmWrite[d])
	}
	if t.Failed() {
		t.FailNow()
	}

	isFSPage := func(a receivedAlert) bool {
		return a.Labels["alertname"] == fsRegressionAlert && a.Labels["target"] == metadataTarget
	}
	var fired receivedAlert
	waitFor(t, "the webhook to receive "+fsRegressionAlert+" for "+metadataTarget, 3*time.Minute, func() (bool, error) {
		a, ok := s.hook.first(func(a receivedAlert) bool { return a.Status == "firing" && isFSPage(a) && a.At.After(cStart) })
		fired = a
		return ok, s.failedRuns()
	})
	tl.mark(t, "FIRED: the webhook received %s for %s, %s after the throttle (%.1f probe intervals)", fsRegressionAlert, metadataTarget,
		fired.At.Sub(cStart).Round(time.Second), fired.At.Sub(cStart).Seconds()/clusterInterval.Seconds())
	checkFSAlert(t, s, fired, metadataTarget)
	// No server serves the metadata target: the page names none, and
	// does not say that they hold either.
	if d := fired.Annotations["description"]; strings.Contains(d, "Servers whose own probes") || strings.Contains(d, "servers that probe their own") {
		t.Errorf("%s of %s speaks of servers, though none serves it: %q", fsRegressionAlert, metadataTarget, d)
	}
	s.logTargetEvidence(t, metadataTarget)

	// Held a few intervals, so that the clients' own pages of the
	// metadata target, which need two runs in regression, have the time
	// to fire and be held back.
	heldUntil := time.Now().Add(3 * clusterInterval)
	waitFor(t, "three intervals of the page", 4*clusterInterval, func() (bool, error) {
		return time.Now().After(heldUntil), s.failedRuns()
	})
	nodePages, err := s.prom.countOverRange(`ALERTS{alertname="`+regressionAlert+`",alertstate="firing",target="`+metadataTarget+`"}`, cStart)
	if err != nil {
		t.Fatal(err)
	}
	am, err := s.amAlerts(`alertname="` + regressionAlert + `"`)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range am {
		if len(a.Status.InhibitedBy) == 0 {
			t.Errorf("Alertmanager holds %s of %s, not inhibited while %s fires", regressionAlert, s.alertKey(a.Labels), fsRegressionAlert)
		}
	}
	tl.mark(t, "HELD BACK: %d clients' %s of %s fired in Prometheus; Alertmanager holds %d, inhibited", len(nodePages), regressionAlert, metadataTarget, len(am))

	cLift := tl.mark(t, "LIFTED the master's CPU throttle")
	lift()
	s.waitResolved(t, tl, fired, cLift)

	// The data probes and the servers stayed quiet; on the metadata
	// target, only the page and the nodes' pages it holds back.
	s.checkNoAlert(t, cStart, `ALERTS{target!="`+metadataTarget+`"}`, "on the data target or the servers with the master throttled")
	s.checkNoAlert(t, cStart, `ALERTS{alertname!~"`+fsRegressionAlert+`|`+regressionAlert+`|`+belowPlateauAlert+`"}`, "with the master throttled")
	for _, a := range s.hook.received() {
		if !a.At.Before(cStart) && !isFSPage(a) {
			t.Errorf("fault c: the webhook received %s %s at %s; only the file-system page of %s was expected", a.Status, s.alertKey(a.Labels), s.since(a.At), metadataTarget)
		}
	}
	s.logOverlaps(t, cStart, time.Now())
}

// addMetadataTarget reloads every client's daemon with the metadata
// target beside its data target (SIGHUP, as a site's config management
// would) and waits until every node has a low score of it, so that fault c
// can start: metadataScoreRuns runs each. It joins for fault c alone, not
// from the start: bound by the two cores every host shares, the metadata
// runs of all four clients drift and dip together with the machine's load
// (it grows over the test, as MooseFS holds every removed file
// "sustained"), and in 2 of 5 test runs of 30 calm rounds that paged the
// metadata target's file system (evidence -5.3), which on a real cluster,
// each client on CPUs of its own, it would not.
func addMetadataTarget(t *testing.T, s *alertStack, tl *timeline, dataDirs map[*stackDaemon]string, baselines, probeName string) {
	t.Helper()
	s.waitCalm(t, "the metadata target")
	for _, d := range s.daemons {
		writeTargetConfig(t, d.configFile, s.opts, baselines, exporterTarget{name: stackTarget, path: dataDirs[d]}, metadataTargetOf(dataDirs[d], probeName))
		if err := d.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		d.metadataRuns = watchProbeRuns(t, d.url+"/metrics", watchedProbe{target: metadataTarget, name: probeName, metadata: true}, clusterInterval/10)
	}
	added := tl.mark(t, "RELOADED every client's daemon with %s (probe %s, %d empty files)", metadataTarget, probeName, metadataFiles)
	waitFor(t, fmt.Sprintf("%d metadata runs of every client", metadataScoreRuns), (metadataScoreRuns+5)*clusterInterval+time.Minute, func() (bool, error) {
		var short []string
		for _, d := range s.daemons {
			if n := d.metadataRuns.count(); n < metadataScoreRuns {
				short = append(short, fmt.Sprintf("%s %d", d.host, n))
			}
		}
		if len(short) > 0 {
			return false, fmt.Errorf("runs so far: %s", strings.Join(short, ", "))
		}
		got, err := s.prom.query(`plateau_probe_target_low_score{target="` + metadataTarget + `"}`)
		if err == nil && len(got) != len(s.daemons) {
			err = fmt.Errorf("%d of %d nodes have a low score of %s in Prometheus", len(got), len(s.daemons), metadataTarget)
		}
		return err == nil, err
	})
	for _, d := range s.daemons {
		runs, _ := d.metadataRuns.snapshot()
		t.Logf("%s: %d metadata runs since the reload, median %.0f creates/s, %.0f removes/s; last run %s",
			d.host, len(runs), d.metadataRuns.medianRate("create", time.Now()), d.metadataRuns.medianRate("remove", time.Now()), runs[len(runs)-1])
	}
	tl.mark(t, "every client has a low score of %s, %s after the reload", metadataTarget, time.Since(added).Round(time.Second))
}

// dropMetadataTarget reloads every client's daemon with its data target
// alone once fault c is over: the faults after it assert on the data
// target's runs, workers and alerts, and a frozen master (fault e) would
// hang both targets.
// It waits until no daemon exports the metadata target any more.
func dropMetadataTarget(t *testing.T, s *alertStack, tl *timeline, dataDirs map[*stackDaemon]string, baselines string) {
	t.Helper()
	for _, d := range s.daemons {
		writeTargetConfig(t, d.configFile, s.opts, baselines, exporterTarget{name: stackTarget, path: dataDirs[d]})
		if err := d.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every daemon to drop "+metadataTarget+" on reload", time.Minute, func() (bool, error) {
		var left []string
		for _, d := range s.daemons {
			fams, _, err := scrapeFamilies(d.url + "/metrics")
			if err != nil {
				return false, err
			}
			ok, _ := probetest.FamilyValue(fams, "plateau_config_last_reload_successful", nil)
			_, still := probetest.FamilyValue(fams, "plateau_probe_last_run_timestamp_seconds", map[string]string{"target": metadataTarget})
			if ok != 1 || still {
				left = append(left, fmt.Sprintf("%s (reload successful %v, %s still exported %t)", d.host, ok, metadataTarget, still))
			}
		}
		return len(left) == 0, fmt.Errorf("not yet: %s", strings.Join(left, ", "))
	})
	tl.mark(t, "RELOADED every client's daemon without %s", metadataTarget)
	for _, d := range s.daemons {
		// Nothing of the metadata probe's is left in its directory but
		// the target's lock file, which stays by design (a flock on a file
		// that is removed can be taken twice).
		dir := filepath.Join(metadataTargetOf(dataDirs[d], "").path, d.host)
		names, err := readDirNames(dir, 30*time.Second)
		if err != nil {
			t.Errorf("%s: %v", d.host, err)
			continue
		}
		if left := slices.DeleteFunc(names, func(n string) bool { return n == ".lock" }); len(left) > 0 {
			t.Errorf("%s's metadata probe left %v in %s after its target was dropped", d.host, left, dir)
		}
	}
}
