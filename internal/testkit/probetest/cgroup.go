package probetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// IOCgroup is a cgroup with the block I/O controller: cgroup v1 blkio
// where the machine has it (blkio.throttle.*), else cgroup v2 with the io
// controller (io.max, io.stat). Its throttles apply to one device.
//
// Tests use it two ways: to make a real slowdown of a device, and to give
// a device a plateau of the test's choosing. A loop device backed by RAM
// on this VM reads and writes at 5-9 GB/s, but its writes fall to under
// 1 GB/s for tens of seconds at a time when the host is busy; throttled
// to a few hundred MB/s in both directions, the same device measured
// within ±2% run after run (seq write 421-429 MB/s, read 431-437 MB/s
// at 400 MB/s).
type IOCgroup struct {
	v2     bool
	dir    string
	devNum string
}

func (c *IOCgroup) String() string {
	if c.v2 {
		return "cgroup v2 io controller at " + c.dir
	}
	return "cgroup v1 blkio at " + c.dir
}

// DevNum is the "major:minor" of the device the throttles apply to.
func (c *IOCgroup) DevNum() string { return c.devNum }

const cgroupV1Blkio = "/sys/fs/cgroup/blkio"

// NewIOCgroup creates a fresh cgroup for throttling I/O to devNum and
// removes it in cleanup, once every process in it has gone.
func NewIOCgroup(t testing.TB, devNum string) *IOCgroup {
	t.Helper()
	RequireRoot(t)
	name := "plateau-test-" + randomHex(t)
	c := &IOCgroup{devNum: devNum}
	if _, err := os.Stat(filepath.Join(cgroupV1Blkio, "blkio.throttle.read_bps_device")); err == nil {
		c.dir = filepath.Join(cgroupV1Blkio, name)
	} else {
		root, err := cgroupV2WithIO()
		if err != nil {
			t.Fatalf("no block I/O cgroup controller: %s has no blkio.throttle.read_bps_device (cgroup v1) and %v", cgroupV1Blkio, err)
		}
		// A child of the root gets the io files only once the root hands
		// the controller down; enabling it is harmless to other groups.
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+io"), 0o644); err != nil {
			t.Fatalf("enabling the io controller for children of %s: %v", root, err)
		}
		c.v2, c.dir = true, filepath.Join(root, name)
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		t.Fatalf("creating %s: %v", c, err)
	}
	t.Cleanup(func() {
		var pids []int
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			var err error
			if pids, err = c.Pids(); err == nil && len(pids) == 0 {
				break
			}
		}
		if err := os.Remove(c.dir); err != nil {
			t.Errorf("removing %s (processes still in it: %v): %v", c, pids, err)
		}
	})
	return c
}

// cgroupV2WithIO returns the mount point of a cgroup v2 hierarchy whose
// root offers the io controller.
func cgroupV2WithIO() (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("reading mountinfo: %w", err)
	}
	var seen []string
	for _, line := range strings.Split(string(data), "\n") {
		// Fields after " - " are fstype, source, options (proc(5)).
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		mnt := f[4]
		seen = append(seen, mnt)
		ctl, err := os.ReadFile(filepath.Join(mnt, "cgroup.controllers"))
		if err == nil && slices.Contains(strings.Fields(string(ctl)), "io") {
			return mnt, nil
		}
	}
	if len(seen) == 0 {
		return "", errors.New("no cgroup v2 hierarchy is mounted")
	}
	return "", fmt.Errorf("the cgroup v2 hierarchies at %v do not offer the io controller (it may be bound to a v1 hierarchy)", seen)
}

func randomHex(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// ProcsFile is the group's cgroup.procs: a process that writes its pid
// there is in the group, and so is everything it forks afterwards.
func (c *IOCgroup) ProcsFile() string { return filepath.Join(c.dir, "cgroup.procs") }

// Pids lists the processes in the group.
func (c *IOCgroup) Pids() ([]int, error) {
	data, err := os.ReadFile(c.ProcsFile())
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.ProcsFile(), err)
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is no pid: %w", c.ProcsFile(), f, err)
		}
		out = append(out, pid)
	}
	return out, nil
}

// Enter moves the calling process, all its threads, into the group, so
// that every command the test starts from now on is in it from its first
// I/O; cleanup moves it back where it was before the group is removed.
func (c *IOCgroup) Enter(t testing.TB) {
	t.Helper()
	back, err := c.currentGroup()
	if err != nil {
		t.Fatal(err)
	}
	self := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(c.ProcsFile(), self, 0o644); err != nil {
		t.Fatalf("moving the test process into %s: %v", c, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(back, "cgroup.procs"), self, 0o644); err != nil {
			t.Errorf("moving the test process back to %s: %v", back, err)
		}
	})
}

// currentGroup is the directory of the calling process's cgroup in the
// hierarchy c lives in, from /proc/self/cgroup (cgroups(7)).
func (c *IOCgroup) currentGroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	root := filepath.Dir(c.dir)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if (c.v2 && f[0] == "0" && f[1] == "") || (!c.v2 && slices.Contains(strings.Split(f[1], ","), "blkio")) {
			return filepath.Join(root, f[2]), nil
		}
	}
	return "", fmt.Errorf("/proc/self/cgroup names no %s group:\n%s", map[bool]string{true: "cgroup v2", false: "blkio"}[c.v2], data)
}

// ThrottleRead limits reads of the device by the group's processes to bps
// bytes per second; 0 lifts the limit.
func (c *IOCgroup) ThrottleRead(bps int64) error { return c.throttle("read_bps", "rbps", bps) }

// ThrottleWrite limits writes to the device by the group's processes to
// bps bytes per second; 0 lifts the limit.
func (c *IOCgroup) ThrottleWrite(bps int64) error { return c.throttle("write_bps", "wbps", bps) }

// Throttle limits the group's reads and writes of the device to bps bytes
// per second each (ThrottleRead and ThrottleWrite); 0 lifts both limits.
func (c *IOCgroup) Throttle(bps int64) error {
	if err := c.ThrottleRead(bps); err != nil {
		return err
	}
	return c.ThrottleWrite(bps)
}

// ThrottleIOPS limits the group's reads and writes of the device to
// riops and wiops requests per second; 0 lifts a limit. Only I/O that
// reaches the device as one bio per request is paced request by request:
// O_DIRECT, as the random probe does it.
func (c *IOCgroup) ThrottleIOPS(riops, wiops int64) error {
	if err := c.throttle("read_iops", "riops", riops); err != nil {
		return err
	}
	return c.throttle("write_iops", "wiops", wiops)
}

// CgroupWrite is one write to a cgroup's control file: Line into File.
type CgroupWrite struct{ File, Line string }

// ThrottleWrites are the writes that ThrottleRead(bps) and
// ThrottleWrite(bps) make, in that order: what a person writes to set
// the same limits by hand.
func (c *IOCgroup) ThrottleWrites(bps int64) []CgroupWrite {
	return []CgroupWrite{c.setting("read_bps", "rbps", bps), c.setting("write_bps", "wbps", bps)}
}

// setting is the write that sets one limit: v1File is the
// blkio.throttle.<v1File>_device file of cgroup v1, v2Key the key of
// io.max in cgroup v2, which leaves the keys a write does not name as
// they were.
func (c *IOCgroup) setting(v1File, v2Key string, limit int64) CgroupWrite {
	if c.v2 {
		value := strconv.FormatInt(limit, 10)
		if limit == 0 {
			value = "max"
		}
		return CgroupWrite{File: filepath.Join(c.dir, "io.max"), Line: fmt.Sprintf("%s %s=%s", c.devNum, v2Key, value)}
	}
	return CgroupWrite{File: filepath.Join(c.dir, "blkio.throttle."+v1File+"_device"), Line: fmt.Sprintf("%s %d", c.devNum, limit)}
}

// throttle sets one limit (see setting).
func (c *IOCgroup) throttle(v1File, v2Key string, limit int64) error {
	w := c.setting(v1File, v2Key, limit)
	if err := os.WriteFile(w.File, []byte(w.Line), 0o644); err != nil {
		return fmt.Errorf("writing %q to %s: %w", w.Line, w.File, err)
	}
	return nil
}

// ReadBytes is what the group's processes have read from the device, as
// the controller accounts it: proof that a probe's bios are charged to
// the group the throttle applies to.
func (c *IOCgroup) ReadBytes() (int64, error) {
	file := filepath.Join(c.dir, "blkio.throttle.io_service_bytes")
	if c.v2 {
		file = filepath.Join(c.dir, "io.stat")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", file, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != c.devNum {
			continue
		}
		if c.v2 {
			// "MAJ:MIN rbytes=N wbytes=N rios=N ..." (cgroup-v2.rst, io.stat)
			for _, kv := range f[1:] {
				if v, ok := strings.CutPrefix(kv, "rbytes="); ok {
					return strconv.ParseInt(v, 10, 64)
				}
			}
		} else if len(f) == 3 && f[1] == "Read" {
			// "MAJ:MIN Read N" (blkio-controller.rst, io_service_bytes)
			return strconv.ParseInt(f[2], 10, 64)
		}
	}
	return 0, nil
}
