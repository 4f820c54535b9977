package collector

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// The gpfs collector's disk diagnosis asks mmlsdisk about each file system
// the node knows: a disk that is down or recovering, or suspended or being
// emptied, on the file system a probe writes to explains a drop that looks
// like the storage's fault.
//
// The file systems come from "mmlsfs all -T -Y", which prints one row per
// file system with its default mount point (-T restricts the listing to
// that attribute; without it mmlsfs prints some sixty rows per file
// system), as IBM documents for mmlsfs -Y and gpfs_exporter's tests show:
//
//	mmlsfs::HEADER:version:reserved:reserved:deviceName:fieldName:data:remarks:
//	mmlsfs::0:1:::scratch:defaultMountPoint:%2Fgpfs%2Fscratch::
//
// together with the GPFS mounts of /proc/mounts, so that a remote file
// system mmlsfs could not reach is still asked about. "mmlsdisk DEVICE -Y"
// prints one row per disk:
//
//	mmlsdisk::HEADER:version:reserved:reserved:nsdName:driverType:sectorSize:failureGroup:metadata:data:status:availability:diskID:storagePool:remarks:...
//
// availability is up, down, recovering or unrecovered; status is ready,
// suspended, to be emptied, being emptied, emptied, replacing or
// replacement (mmlsdisk command reference; mmchdisk for what sets them).

// gpfsFilesystem is a file system the node knows, with the mount point
// mmlsfs gives for it ("" when it is known only from /proc/mounts).
type gpfsFilesystem struct {
	name, mountpoint string
}

// parseMmlsfs parses "mmlsfs all -T -Y". A row whose name is not a valid
// device name is skipped and returned in bad: it will not be put on a
// command line.
func parseMmlsfs(out []byte) ([]gpfsFilesystem, badLines, error) {
	t, bad, err := requireYTable(out, "mmlsfs all -T -Y", "mmlsfs", "")
	if err != nil {
		return nil, bad, err
	}
	devCol, fieldCol, dataCol := t.column("deviceName"), t.column("fieldName"), t.column("data")
	if devCol < 0 {
		return nil, bad, errors.New("mmlsfs all -T -Y: no deviceName column in HEADER")
	}
	var list []gpfsFilesystem
	index := map[string]int{}
	for i, row := range t.rows {
		name := t.value(row, devCol)
		if !validGPFSDevice(name) {
			t.badRow(&bad, i, "not a GPFS device name (letters, digits, _ - .), not asked about")
			continue
		}
		j, seen := index[name]
		if !seen {
			j = len(list)
			index[name] = j
			list = append(list, gpfsFilesystem{name: name})
		}
		if t.value(row, fieldCol) == "defaultMountPoint" {
			list[j].mountpoint = t.value(row, dataCol)
		}
	}
	if len(list) == 0 && len(t.rows) > 0 {
		return nil, bad, fmt.Errorf("mmlsfs all -T -Y: none of the %d rows names a usable file system (first %s)", len(t.rows), bad.first)
	}
	return list, bad, nil
}

// gpfsDisk is one row of mmlsdisk -Y.
type gpfsDisk struct {
	name, pool, failureGroup, status, availability string
}

// parseMmlsdisk parses "mmlsdisk DEVICE -Y". A disk row without its name,
// status or availability is skipped and returned in bad.
func parseMmlsdisk(out []byte) ([]gpfsDisk, badLines, error) {
	t, bad, err := requireYTable(out, "mmlsdisk -Y", "mmlsdisk", "")
	if err != nil {
		return nil, bad, err
	}
	nameCol, poolCol, fgCol := t.column("nsdName"), t.column("storagePool"), t.column("failureGroup")
	statusCol, availCol := t.column("status"), t.column("availability")
	if nameCol < 0 || statusCol < 0 || availCol < 0 {
		return nil, bad, errors.New("mmlsdisk -Y: HEADER lacks nsdName, status or availability")
	}
	disks := make([]gpfsDisk, 0, len(t.rows))
	for i, row := range t.rows {
		d := gpfsDisk{
			name:         t.value(row, nameCol),
			pool:         t.value(row, poolCol),
			failureGroup: t.value(row, fgCol),
			status:       t.value(row, statusCol),
			availability: t.value(row, availCol),
		}
		if d.name == "" || d.status == "" || d.availability == "" {
			t.badRow(&bad, i, "disk row lacks its name, status or availability")
			continue
		}
		disks = append(disks, d)
	}
	if len(disks) == 0 && len(t.rows) > 0 {
		return nil, bad, fmt.Errorf("mmlsdisk -Y: none of the %d disk rows could be read (first %s)", len(t.rows), bad.first)
	}
	return disks, bad, nil
}

type gpfsDiskDescs struct {
	up, ready       typedDesc
	notUp, notReady typedDesc
}

func newGPFSDiskDescs() gpfsDiskDescs {
	labels := []string{"filesystem", "disk", "pool", "failure_group"}
	return gpfsDiskDescs{
		up: gpfsGauge("disk_up",
			"1 if the disk's availability is up (mmlsdisk), 0 if it is down, recovering or unrecovered.", labels),
		// 1 if the disk's status is ready (mmlsdisk), 0 if it is
		// suspended, being emptied, replacing or in another state.
		ready: gpfsGauge("disk_ready",
			"1 if the disk's status is ready (mmlsdisk), else 0.", labels),
		// Disks of the file system whose availability is not up
		// (mmlsdisk); absent when mmlsdisk failed for it.
		notUp: gpfsGauge("disks_not_up",
			"Disks of the file system whose availability is not up (mmlsdisk).", []string{"filesystem"}),
		// Disks of the file system whose status is not ready (mmlsdisk);
		// absent when mmlsdisk failed for it.
		notReady: gpfsGauge("disks_not_ready",
			"Disks of the file system whose status is not ready (mmlsdisk).", []string{"filesystem"}),
	}
}

// mmlsfs records the file systems of the cluster for mmlsdisk, mmlsqos and
// the mount state. A run that lists none (mmlsfs failed) keeps the last
// list: the file systems did not go away because mmlsfs timed out.
func (c *gpfsCollector) mmlsfs(ctx context.Context) ([]prometheus.Metric, error) {
	out, err := c.runner.run(ctx, nil, c.cfg.mmlsfsPath, "all", "-T", "-Y")
	var cmdErr *commandError
	if err != nil && !errors.As(err, &cmdErr) {
		return nil, err
	}
	// mmlsfs all exits non-zero when a remote cluster cannot be reached,
	// after listing the file systems it could: keep those.
	list, bad, parseErr := parseMmlsfs(out)
	c.parseErrs.record(gpfsSourceMmlsfs, bad)
	if len(list) > 0 {
		c.listedMu.Lock()
		c.listed = list
		c.listedGen++
		c.listedMu.Unlock()
	}
	return nil, errors.Join(err, parseErr)
}

// listedFilesystems returns the file systems of mmlsfs's last useful run.
func (c *gpfsCollector) listedFilesystems() []gpfsFilesystem {
	list, _ := c.listedFilesystemsGen()
	return list
}

// listedFilesystemsGen also returns the list's generation, which changes
// with each run that sets it.
func (c *gpfsCollector) listedFilesystemsGen() ([]gpfsFilesystem, uint64) {
	c.listedMu.Lock()
	defer c.listedMu.Unlock()
	return c.listed, c.listedGen
}

// filesystems returns the file systems to ask mmlsdisk and mmlsqos about:
// those mmlsfs listed and those mounted now, sorted by name. It waits for
// mmlsfs's first run so the first runs of those commands see its list.
func (c *gpfsCollector) filesystems(ctx context.Context) ([]gpfsFilesystem, error) {
	if cmd := c.mmlsfsCmd; cmd != nil {
		select {
		case <-cmd.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the first run of mmlsfs: %w", ctx.Err())
		}
	}
	var list []gpfsFilesystem
	seen := map[string]bool{}
	for _, f := range c.listedFilesystems() {
		seen[f.name] = true
		list = append(list, f)
	}
	var errs []error
	if c.cfg.mountsPath != "" {
		mounts, err := readGPFSMounts(c.cfg.mountsPath)
		if err != nil {
			errs = append(errs, err)
		}
		for _, m := range mounts {
			if seen[m.filesystem] {
				continue
			}
			seen[m.filesystem] = true
			if !validGPFSDevice(m.filesystem) {
				errs = append(errs, fmt.Errorf("%s: GPFS mount source %q is not a device name (letters, digits, _ - .); it is not asked about",
					c.cfg.mountsPath, labelValue(m.filesystem)))
				continue
			}
			list = append(list, gpfsFilesystem{name: m.filesystem})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	return list, errors.Join(errs...)
}

// perFilesystem runs path with "DEVICE -Y" for each file system, each call
// with its own deadline, and hands each output to use. It stops at the
// first call that timed out or is still running from an earlier run: the
// daemon is then wedged and every further call would hang as well.
func (c *gpfsCollector) perFilesystem(ctx context.Context, name, path string, use func(fs string, out []byte) error) error {
	list, err := c.filesystems(ctx)
	errs := []error{err}
	for i, f := range list {
		callCtx, cancel := c.callContext(ctx)
		out, err := c.runner.run(callCtx, nil, path, f.name, "-Y")
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", name, f.name, err))
			if errors.Is(err, errCommandTimeout) || errors.Is(err, errStillRunning) {
				if rest := len(list) - i - 1; rest > 0 {
					errs = append(errs, fmt.Errorf("%s: %d more file systems not asked after that", name, rest))
				}
				break
			}
			continue
		}
		if err := use(f.name, out); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", name, f.name, err))
		}
	}
	return errors.Join(errs...)
}

func (c *gpfsCollector) mmlsdisk(ctx context.Context) ([]prometheus.Metric, error) {
	d := &c.diskDescs
	var ms []prometheus.Metric
	err := c.perFilesystem(ctx, "mmlsdisk", c.cfg.mmlsdiskPath, func(fsName string, out []byte) error {
		disks, bad, err := parseMmlsdisk(out)
		c.parseErrs.record(gpfsSourceMmlsdisk, bad)
		if err != nil || len(disks) == 0 {
			return err
		}
		fsLabel := labelValue(fsName)
		seen := seenSet[string]{}
		notUp, notReady := 0, 0
		for _, disk := range disks {
			name := labelValue(disk.name)
			if !seen.first(name) {
				continue
			}
			up, ready := 0.0, 0.0
			if disk.availability == "up" {
				up = 1
			} else {
				notUp++
			}
			if disk.status == "ready" {
				ready = 1
			} else {
				notReady++
			}
			l := newLabelPairs(d.up.desc, fsLabel, name, labelValue(disk.pool), labelValue(disk.failureGroup))
			ms = append(ms, l.metric(&d.up, up), l.metric(&d.ready, ready))
		}
		ms = append(ms,
			d.notUp.mustNewConstMetric(float64(notUp), fsLabel),
			d.notReady.mustNewConstMetric(float64(notReady), fsLabel))
		return nil
	})
	return ms, err
}
