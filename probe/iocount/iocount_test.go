package iocount

import (
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

func fixture(gpfs GPFSBytes) *Proc {
	at := time.Unix(1700000000, 0)
	return &Proc{ProcRoot: "testdata/proc", SysRoot: "testdata/sys", PID: 4242, GPFS: gpfs, now: func() time.Time { return at }}
}

func TestSample(t *testing.T) {
	mmpmonAt := time.Unix(1699999990, 0)
	gpfs := func(fs string) (uint64, uint64, time.Time, bool) {
		switch fs {
		case "scratch":
			return 111, 222, mmpmonAt, true
		case "home":
			return 3, 4, mmpmonAt, true
		}
		return 0, 0, time.Time{}, false
	}
	for _, tc := range []struct {
		path string
		want Sample
		ok   bool
	}{
		// The partition's own line of diskstats, sectors of 512 bytes.
		{"/local/plateau", Sample{Read: 800000 * 512, Write: 1600000 * 512, Source: SourceDiskstats, Key: "nvme0n1p3"}, true},
		{"/var/tmp/x", Sample{Read: 72000 * 512, Write: 144000 * 512, Source: SourceDiskstats, Key: "sda2"}, true},
		// Bytes to and from the server.
		{"/home/.plateau", Sample{Read: 1210214218, Write: 901120, Source: SourceMountstats, Key: "/home"}, true},
		// Mounted over: the second, topmost entry.
		{"/projects/p", Sample{Read: 19327352832, Write: 8053063680, Source: SourceMountstats, Key: "/projects"}, true},
		{"/data/old runs/p", Sample{Read: 65536, Write: 0, Source: SourceMountstats, Key: "/data/old runs"}, true},
		{"/gpfs/scratch/.plateau", Sample{Read: 111, Write: 222, Source: SourceMmpmon, Key: "scratch"}, true},
		// A /dev/ prefix on the source is the same file system name.
		{"/gpfs/home", Sample{Read: 3, Write: 4, Source: SourceMmpmon, Key: "home"}, true},
		// No block device behind tmpfs.
		{"/run/plateau", Sample{}, false},
	} {
		got, ok := fixture(gpfs).Sample(tc.path)
		if ok != tc.ok {
			t.Errorf("Sample(%s): ok = %v, want %v", tc.path, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if got.At.IsZero() {
			t.Errorf("Sample(%s): no time", tc.path)
		}
		got.At = time.Time{}
		if got != tc.want {
			t.Errorf("Sample(%s) = %+v, want %+v", tc.path, got, tc.want)
		}
	}
	if s, _ := fixture(gpfs).Sample("/gpfs/scratch"); !s.At.Equal(mmpmonAt) {
		t.Errorf("GPFS sample at %v, want the mmpmon run's time %v", s.At, mmpmonAt)
	}
	if _, ok := fixture(nil).Sample("/gpfs/scratch"); ok {
		t.Error("GPFS without its counters sampled")
	}
	if _, ok := (&Proc{ProcRoot: "testdata/nosuch", PID: 4242}).Sample("/"); ok {
		t.Error("sampled without a /proc")
	}
}

func TestMountOf(t *testing.T) {
	mounts := []*procfs.MountInfo{
		{MountPoint: "/", FSType: "ext4"},
		{MountPoint: "/gpfs", FSType: "tmpfs"},
		{MountPoint: "/gpfs/scratch", FSType: "gpfs"},
	}
	for path, want := range map[string]string{
		"/gpfs/scratch/x":   "gpfs",
		"/gpfs/scratch":     "gpfs",
		"/gpfs/scratch2":    "tmpfs",
		"/gpfs/scratch/../": "tmpfs",
		"/etc":              "ext4",
	} {
		if m := MountOf(mounts, path); m == nil || m.FSType != want {
			t.Errorf("MountOf(%s) = %+v, want %s", path, m, want)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/x\134y`: `/x\y`, `/t\04`: `/t\04`, `\`: `\`, `/plain`: "/plain"} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzUnescape(f *testing.F) {
	for _, s := range []string{`/a\040b`, `\`, `\777`, `/x\134y\0`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := unescape(s); len(got) > len(s) {
			t.Errorf("unescape(%q) = %q is longer", s, got)
		}
	})
}
