//go:build integration

package mfscluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

const (
	// clusterMinFree is the clients' target's min_free_ratio, in their
	// config from the start, as a site would set it. The runs before
	// fault f leak their chunks (clusterDiskSize) and leave the file
	// system ~48% free after fault a; fault f fills it to under
	// clusterFillTo by allocating space on the chunkservers' own disks.
	clusterMinFree = 0.3
	clusterFillTo  = 0.2

	// clusterMetaProbe is a metadata probe of empty files, which writes no
	// data and so runs on a file system under its min_free_ratio. It joins
	// the clients' config (a reload) only for fault f, which asserts that
	// it runs, not what it measures: on this shared two-core machine its
	// 32 files take 26-44ms through the master, characterize measured its
	// ops at ±26% (create) and ±64% (stat), and configured from the start
	// its verdicts paged four times in 30 calm rounds while the data probe
	// of the same runs stayed within 0.93-1.01 of its baseline. It leaves
	// again before it has the runs for a change statistic.
	clusterMetaProbe = "md"
)

// clientTarget is a client's data target: the stack's probe of dir with
// clusterMinFree, and, withMeta, clusterMetaProbe beside it.
func clientTarget(dir string, withMeta bool) alertstack.ExporterTarget {
	target := alertstack.ExporterTarget{Name: alertstack.Target, Path: dir, MinFreeRatio: clusterMinFree}
	if withMeta {
		target.MoreProbes = []string{fmt.Sprintf("{name: %s, kind: metadata, workers: 1, files: 32, file_size: 0}", clusterMetaProbe)}
	}
	return target
}

// reloadClients rewrites every client daemon's config with its targets
// and sends it SIGHUP, as a site's configuration management would.
func reloadClients(t *testing.T, s *alertstack.Stack, baselines string, targets func(*alertstack.Daemon) []alertstack.ExporterTarget) {
	t.Helper()
	for _, d := range s.Daemons {
		alertstack.WriteTargetConfig(t, d.ConfigFile, s.Opts, baselines, targets(d)...)
		if err := d.Proc.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
}

// faultFileSystemFull is fault f: the file system filled under the
// clients' min_free_ratio. The data probe skips on every node with reason
// min_free, the metadata probe (reloaded in for the fault) goes on, no
// probe file is left, and nothing pages: the one alert allowed is
// PlateauProbeNotRun, the warning that says a data probe does not run.
// Once the space is freed, every node's data probe runs again and the
// warning resolves.
//
// It is the last fault of TestClusterFaults. What the cluster does after
// the space comes back is MooseFS's, not this fault's: in one run of seven
// with fault f in the middle of the test (4 GiB disks, equal fills), every
// client slowed for a minute some 20s after the free (runs at 0.18-0.63 of
// baseline, timeouts) and the file-system page fired on real slow runs. So
// the fault's "nothing pages" covers the fill and the first run of every
// node after it, and the fill keeps every chunkserver at the same share of
// free space (fillCluster), so that it gives the master's balancer nothing
// to move.
func faultFileSystemFull(t *testing.T, s *alertstack.Stack, c *mfscluster.Cluster, tl *alertstack.Timeline, probeDirs map[*alertstack.Daemon]string, baselines string) {
	waitCalm(s, t, "fault f")
	fStart := tl.Mark(t, "fault f: RELOADED every client's daemon with a metadata probe %s added", clusterMetaProbe)
	reloadClients(t, s, baselines, func(d *alertstack.Daemon) []alertstack.ExporterTarget {
		return []alertstack.ExporterTarget{clientTarget(probeDirs[d], true)}
	})
	s.WaitFor(t, "every client's daemon to run its metadata probe, reloaded into its config", time.Minute, func() (bool, error) {
		var none []string
		for _, d := range s.Daemons {
			if readFullCounts(t, d).metaRuns < 1 {
				none = append(none, d.Host)
			}
		}
		return len(none) == 0, fmt.Errorf("no metadata run yet on %v", none)
	})
	tl.Mark(t, "every client's daemon runs %s too", clusterMetaProbe)

	fillers := fillCluster(t, c, clusterFillTo)
	filled := tl.Mark(t, "fault f: FILLED the chunkservers' disks until the mounts are under %.0f%% free (min_free_ratio %.0f%%)", 100*clusterFillTo, 100*clusterMinFree)
	before := map[*alertstack.Daemon]fullCounts{}
	for _, d := range s.Daemons {
		before[d] = readFullCounts(t, d)
	}
	since := func(d *alertstack.Daemon) fullCounts { return readFullCounts(t, d).minus(before[d]) }
	// Three slots of each daemon under the min_free_ratio; at most one
	// run of the data probe was in flight when the space went.
	s.WaitFor(t, "every client to skip its data probe 3 times for min_free and run its metadata probe 3 times", 2*time.Minute, func() (bool, error) {
		var behind []string
		for _, d := range s.Daemons {
			if n := since(d); n.minFreeSkips < 3 || n.metaRuns < 3 {
				behind = append(behind, fmt.Sprintf("%s: %.0f skips, %.0f metadata runs", d.Host, n.minFreeSkips, n.metaRuns))
			}
		}
		return len(behind) == 0, fmt.Errorf("%s", strings.Join(behind, "; "))
	})
	for _, d := range s.Daemons {
		n := since(d)
		if n.dataRuns > 1 {
			s.Errorf(t, "%s: the data probe ran %.0f times under the min_free_ratio", d.Host, n.dataRuns)
		}
		t.Logf("%s under min_free_ratio: %.0f min_free skips of %s, %.0f successful %s runs", d.Host, n.minFreeSkips, alertstack.Probe, n.metaRuns, clusterMetaProbe)
	}
	// No probe file left: each probe directory holds its lock file and,
	// at most, the run directory of a metadata run in flight, which goes
	// within the run.
	for _, d := range s.Daemons {
		waitNoProbeFiles(t, probeDirs[d], d.Host)
	}
	// The metadata probe leaves before it has a statistic (see
	// clusterMetaProbe).
	for _, d := range s.Daemons {
		fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := probetest.FamilyValue(fams, "plateau_probe_change_ratio", map[string]string{"target": alertstack.Target, "probe": clusterMetaProbe}); ok {
			s.Fatalf(t, "%s: the metadata probe has a change ratio (%g) already: the fault lasted too long", d.Host, v)
		}
	}
	reloadClients(t, s, baselines, func(d *alertstack.Daemon) []alertstack.ExporterTarget {
		return []alertstack.ExporterTarget{clientTarget(probeDirs[d], false)}
	})
	s.WaitFor(t, "every client's daemon to drop its metadata probe", time.Minute, func() (bool, error) {
		var still []string
		for _, d := range s.Daemons {
			fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
			if err != nil {
				return false, err
			}
			if _, ok := probetest.FamilyValue(fams, "plateau_probe_runs_total", map[string]string{"target": alertstack.Target, "probe": clusterMetaProbe}); ok {
				still = append(still, d.Host)
			}
		}
		return len(still) == 0, fmt.Errorf("still running %s: %v", clusterMetaProbe, still)
	})
	freed := tl.Mark(t, "FREED the chunkservers' disks (metadata probe removed), %s after the fill", time.Since(filled).Round(time.Second))
	for _, f := range fillers {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	// The master learns of the space from the chunkservers' reports: the
	// mounts count it again some seconds after the free, and the data
	// probe's first run follows.
	for _, d := range s.Daemons {
		d.Runs.FirstRunStartedAfter(t, "the space was freed on "+d.Host, freed, clusterInterval)
	}
	s.WaitFor(t, "PlateauProbeNotRun to resolve on every node", 2*time.Minute, func() (bool, error) {
		held, err := s.Prom.Query(`ALERTS{alertname="` + notRunAlert + `"}`)
		if err != nil || len(held) > 0 {
			return false, fmt.Errorf("Prometheus holds %d %s (%v)", len(held), notRunAlert, err)
		}
		return true, nil
	})
	tl.Mark(t, "RECOVERED: every client's data probe ran again and %s resolved, %s after the space was freed", notRunAlert, time.Since(freed).Round(time.Second))
	checkNoAlert(s, t, fStart, `ALERTS{alertname!="`+notRunAlert+`"}`, "with the file system full")
	checkNotifiedOnly(s, t, "f", fStart, func(a alertstack.ReceivedAlert) bool { return a.Labels["alertname"] == notRunAlert }, notRunAlert)
	notRun, err := s.Prom.CountOverRange(`ALERTS{alertname="`+notRunAlert+`",alertstate="firing"}`, fStart)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fault f: %s fired for %d of %d nodes", notRunAlert, len(notRun), len(s.Daemons))
}

// waitNoProbeFiles waits until host's probe directory of target holds
// nothing but its lock file: a run in flight, which removes its own
// files when it ends, may take two probe intervals.
func waitNoProbeFiles(t *testing.T, target, host string) {
	t.Helper()
	alertstack.WaitFor(t, "no probe file left in "+filepath.Join(target, host), 2*clusterInterval, func() (bool, error) {
		left := probetest.HostProbeDirEntries(t, target, host)
		return len(left) == 0, fmt.Errorf("left %v", left)
	})
}

// fullCounts are a client daemon's counters that fault f reads, from one
// scrape: successful runs of the data and the metadata probe, and the data
// probe's skips for min_free.
type fullCounts struct{ dataRuns, metaRuns, minFreeSkips float64 }

func readFullCounts(t *testing.T, d *alertstack.Daemon) fullCounts {
	t.Helper()
	fams, _, err := alertstack.ScrapeFamilies(d.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	value := func(name, probe, k, v string) float64 {
		n, _ := probetest.FamilyValue(fams, name, map[string]string{"target": alertstack.Target, "probe": probe, k: v})
		return n
	}
	return fullCounts{
		dataRuns:     value("plateau_probe_runs_total", alertstack.Probe, "result", "success"),
		metaRuns:     value("plateau_probe_runs_total", clusterMetaProbe, "result", "success"),
		minFreeSkips: value("plateau_probe_skips_total", alertstack.Probe, "reason", "min_free"),
	}
}

func (c fullCounts) minus(o fullCounts) fullCounts {
	return fullCounts{c.dataRuns - o.dataRuns, c.metaRuns - o.metaRuns, c.minFreeSkips - o.minFreeSkips}
}

// fillCluster allocates a file on each chunkserver's own disk, beside its
// chunks, until a client's mount is under ratio free, and returns the
// files (removing them frees the space). fallocate writes no data. Each
// disk is filled to the same share of free space, whatever chunks it
// holds: fault a leaves cs-a with ~0.5 GiB more than its peers, and an
// equal fill of every disk would take cs-a to its LeaveSpace, one server
// full while the others are not, which is another fault; filled alike,
// the servers' use is also equal, so the master's balancer, which moves
// chunks between servers whose use differs by more than
// ACCEPTABLE_PERCENTAGE_DIFFERENCE, has nothing to move while the file
// system is full.
func fillCluster(t *testing.T, c *mfscluster.Cluster, ratio float64) []string {
	t.Helper()
	// Each disk is left with mfscluster.LeaveSpace and, of the rest, what
	// the master counts, a twentieth under ratio: the chunkservers round
	// what they report, and the skip must not depend on it.
	keep := ratio - 0.05
	var files []string
	for _, cs := range c.ChunkServers {
		var ds unix.Statfs_t
		if err := unix.Statfs(cs.Disk.Mount, &ds); err != nil {
			t.Fatal(err)
		}
		total, avail := int64(ds.Blocks)*ds.Bsize, int64(ds.Bavail)*ds.Bsize
		n := avail - mfscluster.LeaveSpace - int64(keep*float64(total-mfscluster.LeaveSpace))
		if n <= 0 {
			t.Logf("%s: %d MiB free already, left as it is", cs, avail>>20)
			continue
		}
		f := filepath.Join(cs.Disk.Mount, "filler")
		fh, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Fallocate(int(fh.Fd()), 0, 0, n)
		fh.Close()
		t.Cleanup(func() { os.Remove(f) })
		if err != nil {
			t.Fatalf("fallocate %d MiB on %s: %v", n>>20, cs, err)
		}
		files = append(files, f)
		t.Logf("%s: allocated %d MiB, its disk now %.1f%% free", cs, n>>20, 100*statfsFree(t, cs.Disk.Mount))
	}
	mnt := c.Clients[0].Mount
	alertstack.WaitFor(t, fmt.Sprintf("%s to be under %.0f%% free", mnt, 100*ratio), time.Minute, func() (bool, error) {
		free := statfsFree(t, mnt)
		return free < ratio, fmt.Errorf("%.1f%% free", 100*free)
	})
	t.Logf("%s: %.1f%% free after the fill", mnt, 100*statfsFree(t, mnt))
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
