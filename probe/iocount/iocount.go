// Package iocount reads how many bytes this node has moved on the file
// system under a path, from counters the kernel or GPFS keep for the whole
// node: /proc/diskstats for a local block device, /proc/<pid>/mountstats
// for NFS, mmpmon's fs_io_s for GPFS (through a function the daemon wires
// to the gpfs collector, which this package does not import). The
// scheduler samples them before and after a probe run and subtracts what
// the probe moved itself, so that a slow run on a node busy with its own
// jobs' I/O says so.
//
// Every read is of a /proc file (or of values already in memory): nothing
// here stats, opens or lists the probed path, which may be a hung mount.
// The path is matched to its mount by name, against the longest mount
// point in /proc/<pid>/mountinfo that contains it; symbolic links in the
// configured path are not followed.
package iocount

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"
)

// Sources, the origin of a Sample's counters.
const (
	SourceDiskstats  = "diskstats"
	SourceMountstats = "mountstats"
	SourceMmpmon     = "mmpmon"
)

// Sample is the node's byte counters of one file system at one moment.
type Sample struct {
	Read, Write uint64
	// Source names where the counters come from (SourceDiskstats, ...).
	Source string
	// At is when the counters were read: now for /proc files, the start
	// of the last background mmpmon run for GPFS.
	At time.Time
	// Key identifies the counted object (device, mount or file system):
	// two samples are comparable only when their Source and Key agree.
	Key string
}

// Counters samples the byte counters of the file system under path; ok is
// false when none applies (tmpfs, overlay, an unknown path, GPFS without
// its collector).
type Counters interface {
	Sample(path string) (s Sample, ok bool)
}

// GPFSBytes returns the bytes this node has read from and written to the
// GPFS file system named filesystem (mmpmon's _fs_), as of at.
type GPFSBytes func(filesystem string) (read, write uint64, at time.Time, ok bool)

// Proc is the Counters of this node, from /proc.
type Proc struct {
	// ProcRoot and SysRoot are where proc and sysfs are mounted ("" for
	// /proc and /sys); tests point them at fixtures.
	ProcRoot, SysRoot string
	// PID is the process whose mount namespace is read (0: this one).
	PID int
	// GPFS gives the counters of GPFS file systems; nil counts none.
	GPFS GPFSBytes
	// now is time.Now; tests replace it.
	now func() time.Time
}

// Sample implements Counters.
func (p *Proc) Sample(path string) (Sample, bool) {
	root := p.ProcRoot
	if root == "" {
		root = procfs.DefaultMountPoint
	}
	pid := p.PID
	if pid == 0 {
		pid = os.Getpid()
	}
	now := time.Now
	if p.now != nil {
		now = p.now
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		return Sample{}, false
	}
	mounts, err := fs.GetProcMounts(pid)
	if err != nil {
		return Sample{}, false
	}
	m := MountOf(mounts, path)
	if m == nil {
		return Sample{}, false
	}
	switch m.FSType {
	case "gpfs":
		if p.GPFS == nil {
			return Sample{}, false
		}
		name := strings.TrimPrefix(m.Source, "/dev/")
		r, w, at, ok := p.GPFS(name)
		if !ok {
			return Sample{}, false
		}
		return Sample{Read: r, Write: w, Source: SourceMmpmon, At: at, Key: name}, true
	case "nfs", "nfs4":
		proc, err := fs.Proc(pid)
		if err != nil {
			return Sample{}, false
		}
		stats, err := proc.MountStats()
		if err != nil {
			return Sample{}, false
		}
		at := now()
		mp := unescape(m.MountPoint)
		var found *procfs.MountStatsNFS
		// A mount point mounted over shows twice; the last is on top.
		for _, s := range stats {
			if nfs, ok := s.Stats.(*procfs.MountStatsNFS); ok && unescape(s.Mount) == mp {
				found = nfs
			}
		}
		if found == nil {
			return Sample{}, false
		}
		// Bytes to and from the server: what crossed the wire, as O_DIRECT
		// probes move it, rather than what read() served from the cache.
		return Sample{Read: found.Bytes.ReadTotal, Write: found.Bytes.WriteTotal, Source: SourceMountstats, At: at, Key: mp}, true
	}
	major, minor, ok := majorMinor(m.MajorMinorVer)
	if !ok || major == 0 {
		// Major 0 is an anonymous device: tmpfs, overlay, btrfs
		// subvolumes, FUSE; no block device counts its I/O.
		return Sample{}, false
	}
	bfs, err := blockdevice.NewFS(root, p.sysRoot())
	if err != nil {
		return Sample{}, false
	}
	stats, err := bfs.ProcDiskstats()
	if err != nil {
		return Sample{}, false
	}
	at := now()
	for _, d := range stats {
		if uint64(d.MajorNumber) == major && uint64(d.MinorNumber) == minor {
			// diskstats counts 512-byte sectors whatever the device's own.
			return Sample{Read: d.ReadSectors * 512, Write: d.WriteSectors * 512, Source: SourceDiskstats, At: at, Key: d.DeviceName}, true
		}
	}
	return Sample{}, false
}

func (p *Proc) sysRoot() string {
	if p.SysRoot == "" {
		return "/sys"
	}
	return p.SysRoot
}

// MountOf returns the mount whose mount point is the longest that
// contains path, the last of equals (a mount on top of another), or nil.
// path is made absolute and cleaned, without resolving symbolic links.
func MountOf(mounts []*procfs.MountInfo, path string) *procfs.MountInfo {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	var best *procfs.MountInfo
	bestLen := -1
	for _, m := range mounts {
		mp := unescape(m.MountPoint)
		if !within(abs, mp) {
			continue
		}
		if len(mp) >= bestLen {
			best, bestLen = m, len(mp)
		}
	}
	return best
}

// within reports whether path is mp or below it.
func within(path, mp string) bool {
	if mp == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == mp || strings.HasPrefix(path, mp+"/")
}

// unescape undoes the octal escapes (\040 for a space, \011, \012, \134)
// with which the kernel writes mount points in /proc.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func majorMinor(s string) (major, minor uint64, ok bool) {
	a, b, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	major, err1 := strconv.ParseUint(a, 10, 32)
	minor, err2 := strconv.ParseUint(b, 10, 32)
	return major, minor, err1 == nil && err2 == nil
}
