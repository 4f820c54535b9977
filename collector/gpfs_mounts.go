package collector

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The mount state comes from /proc/mounts, read at each scrape: reading it
// never touches a file system, so it cannot hang on a wedged GPFS daemon
// the way a stat of the mount point would. A GPFS mount reads, as in
// gpfs_exporter's collectors/mount_test.go:
//
//	scratch /gpfs/scratch gpfs rw,relatime 0 0
//
// device (the file system's device name; "/dev/scratch" on old releases),
// mount point (with blanks, tabs, newlines and backslashes as \040, \011,
// \012 and \134, see proc_pid_mounts(5)), type, options.

// gpfsMount is one GPFS line of /proc/mounts.
type gpfsMount struct {
	filesystem, mountpoint, mode string
}

// parseGPFSMounts returns the GPFS mounts of a /proc/mounts file, and the
// lines that are not mount entries (fewer than four fields), skipped.
func parseGPFSMounts(data []byte) ([]gpfsMount, badLines) {
	var mounts []gpfsMount
	var bad badLines
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for lineNo := 1; sc.Scan(); lineNo++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 {
			bad.add(lineNo, "not a mount entry", sc.Text())
			continue
		}
		if f[2] != "gpfs" {
			continue
		}
		mode := "rw"
		if opt, _, _ := strings.Cut(f[3], ","); opt == "ro" {
			mode = "ro"
		}
		// unescapeMountField is the NFS collector's (nfs.go).
		mounts = append(mounts, gpfsMount{
			filesystem: strings.TrimPrefix(unescapeMountField(f[0]), "/dev/"),
			mountpoint: unescapeMountField(f[1]),
			mode:       mode,
		})
	}
	return mounts, bad
}

// readGPFSMounts reads and parses the mounts file. Its bad lines are
// counted by the scrape's own parse (mounts), not here again.
func readGPFSMounts(path string) ([]gpfsMount, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading GPFS mounts: %w", err)
	}
	mounts, _ := parseGPFSMounts(data)
	return mounts, nil
}

type gpfsMountDescs struct {
	mounted typedDesc
}

func newGPFSMountDescs() gpfsMountDescs {
	return gpfsMountDescs{
		// Whether the GPFS file system is mounted at the mount point in
		// this mode (/proc/mounts): each mount has a series for mode rw
		// and one for mode ro, 1 for the mode it is mounted in. A file
		// system mmlsfs lists but that is not mounted has both series at
		// 0, with its default mount point from mmlsfs; so max by
		// (filesystem) (plateau_gpfs_filesystem_mounted) == 0 means not
		// mounted, {mode="ro"} == 1 read-only.
		mounted: gpfsGauge("filesystem_mounted",
			"1 if the GPFS file system is mounted at the mount point in this mode, else 0.",
			[]string{"filesystem", "mountpoint", "mode"}),
	}
}

// gpfsMountsCache is the mount state of the last scrape and what it was
// computed from.
type gpfsMountsCache struct {
	mu        sync.Mutex
	data      []byte
	listedGen uint64
	metrics   []prometheus.Metric
}

// mounts sends the mount state of every GPFS file system the node knows:
// those mounted, and those mmlsfs listed in its last run. While neither
// changed, the last scrape's metrics are sent again, and the file's bad
// lines are not counted again either.
func (c *gpfsCollector) mounts(ch chan<- prometheus.Metric) error {
	data, err := os.ReadFile(c.cfg.mountsPath)
	if err != nil {
		return fmt.Errorf("reading GPFS mounts: %w", err)
	}
	listed, gen := c.listedFilesystemsGen()
	mc := &c.mountsCache
	mc.mu.Lock()
	if fileChanged := mc.metrics == nil || !bytes.Equal(mc.data, data); fileChanged || mc.listedGen != gen {
		mounts, bad := parseGPFSMounts(data)
		if fileChanged {
			c.parseErrs.record(gpfsSourceMounts, bad)
		}
		mc.metrics = c.mountMetrics(mounts, listed)
		freezeMetrics(mc.metrics)
		mc.data, mc.listedGen = data, gen
	}
	ms := mc.metrics
	mc.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
	return nil
}

// mountMetrics builds the mount state from the mounts and the file systems
// mmlsfs listed.
func (c *gpfsCollector) mountMetrics(mounts []gpfsMount, listed []gpfsFilesystem) []prometheus.Metric {
	ms := []prometheus.Metric{}
	d := &c.mountDescs
	mounted := map[string]bool{}
	seen := seenSet[[2]string]{}
	for _, m := range mounts {
		key := [2]string{labelValue(m.filesystem), labelValue(m.mountpoint)}
		mounted[m.filesystem] = true
		if !seen.first(key) {
			// The same file system mounted twice on one mount point.
			continue
		}
		rw, ro := 0.0, 0.0
		if m.mode == "ro" {
			ro = 1
		} else {
			rw = 1
		}
		ms = append(ms,
			d.mounted.mustNewConstMetric(rw, key[0], key[1], "rw"),
			d.mounted.mustNewConstMetric(ro, key[0], key[1], "ro"))
	}
	for _, f := range listed {
		if mounted[f.name] {
			continue
		}
		key := [2]string{labelValue(f.name), labelValue(f.mountpoint)}
		if !seen.first(key) {
			continue
		}
		ms = append(ms,
			d.mounted.mustNewConstMetric(0, key[0], key[1], "rw"),
			d.mounted.mustNewConstMetric(0, key[0], key[1], "ro"))
	}
	return ms
}
