package mfscluster

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cgroupV1CPU is the cgroup v1 cpu hierarchy. On cgroup v2 the same
// limit is cpu.max; this machine (v1 hybrid, no controllers on the
// unified hierarchy) cannot test that path, so it is not written.
const cgroupV1CPU = "/sys/fs/cgroup/cpu"

// cfsPeriod is the CFS period the quota is a share of: 20 ms, not the
// kernel's default 100 ms, so that a daemon held to a tenth of a CPU runs
// 2 ms in every 20 and waits at most 18 ms at a time, as on a CPU that is
// slow or shared, rather than 90 ms stalls. Those stalls hit every request
// that arrives in one: on the MooseFS cluster, with the master held to
// 10% while three clients' metadata probes ran, 2 of 6 runs of 8 MiB
// through it (a handful of master requests each) lost 10% over a 100 ms
// period, and none more than 3% over 10 or 20 ms, while the metadata ops
// fell to 0.3 of their rate either way. With the kernel's least quota
// (minCFSQuota), the least share is 5%.
const cfsPeriod = 20_000 // µs

// minCFSQuota is the least quota the kernel accepts (1 ms).
const minCFSQuota = 1000 // µs

// cpuCgroup is a host's group in the cpu hierarchy.
type cpuCgroup struct{ dir string }

// newCPUCgroup creates the group and removes it in cleanup, once the
// processes in it have gone.
func newCPUCgroup(t testing.TB, name string) *cpuCgroup {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cgroupV1CPU, "cpu.cfs_quota_us")); err != nil {
		t.Fatalf("no cgroup v1 cpu controller at %s (%v): ThrottleCPU needs cpu.cfs_quota_us", cgroupV1CPU, err)
	}
	g := &cpuCgroup{dir: filepath.Join(cgroupV1CPU, name)}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		t.Fatalf("creating cgroup %s: %v", g.dir, err)
	}
	if err := os.WriteFile(filepath.Join(g.dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cfsPeriod)), 0o644); err != nil {
		t.Fatalf("cgroup %s: setting the period: %v", g.dir, err)
	}
	t.Cleanup(func() {
		var procs string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			b, err := os.ReadFile(g.procsFile())
			if procs = strings.TrimSpace(string(b)); err == nil && procs == "" {
				break
			}
		}
		if err := os.Remove(g.dir); err != nil {
			t.Errorf("removing cgroup %s (processes still in it: %q): %v", g.dir, procs, err)
		}
	})
	return g
}

func (g *cpuCgroup) procsFile() string { return filepath.Join(g.dir, "cgroup.procs") }

// heldShares is the group's cpu.shares while it is held to a fraction:
// the kernel's most, so that it gets its fraction whenever it asks,
// whatever else the machine runs, as a server on a slow CPU of its own
// would. With the default weight, a daemon held to 15% waited for its
// share behind the other hosts' work on this two-core machine, and the
// metadata ops through it rose and fell with their load.
const heldShares = 262144

// defaultShares is the kernel's default cpu.shares.
const defaultShares = 1024

// limit sets the group's quota to fraction of one CPU, at heldShares; 0
// or less lifts both.
func (g *cpuCgroup) limit(fraction float64) error {
	quota, err := cfsQuota(fraction)
	if err != nil {
		return err
	}
	shares := sharesFor(fraction)
	if err := os.WriteFile(g.sharesFile(), []byte(shares), 0o644); err != nil {
		return fmt.Errorf("cpu: writing %s to %s: %w", shares, g.sharesFile(), err)
	}
	file := g.quotaFile()
	if err := os.WriteFile(file, []byte(quota), 0o644); err != nil {
		return fmt.Errorf("cpu: writing %s to %s: %w", quota, file, err)
	}
	return nil
}

func (g *cpuCgroup) quotaFile() string { return filepath.Join(g.dir, "cpu.cfs_quota_us") }

func (g *cpuCgroup) sharesFile() string { return filepath.Join(g.dir, "cpu.shares") }

// sharesFor is the cpu.shares of a group held to fraction of one CPU:
// heldShares, or the default when fraction lifts the hold.
func sharesFor(fraction float64) string {
	if fraction > 0 {
		return strconv.Itoa(heldShares)
	}
	return strconv.Itoa(defaultShares)
}

// cfsQuota is the cpu.cfs_quota_us that limits a group to fraction of
// one CPU: "-1" (no limit) for 0 or less. A fraction whose quota the
// kernel would refuse is an error, not silently a larger one.
func cfsQuota(fraction float64) (string, error) {
	if fraction <= 0 {
		return "-1", nil
	}
	quota := int(math.Round(fraction * cfsPeriod))
	if quota < minCFSQuota {
		return "", fmt.Errorf("cpu: %g of a CPU is under the least quota the kernel takes, %d µs in every %d (%g)", fraction, minCFSQuota, cfsPeriod, float64(minCFSQuota)/cfsPeriod)
	}
	return strconv.Itoa(quota), nil
}
