// Package probetest holds what plateau_exporter's tests in several packages
// share: a free loopback address, polling with a deadline, what a test does
// when a tool it checks against is missing (skip, or fail in CI), and, for
// the root-only tests, loop-mounted and tmpfs file systems that are torn
// down even when a test fails. Only tests import it.
package probetest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/wait"
)

// FreeAddr returns a loopback address with a port free at the time of the
// call, for a daemon the test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitUntil polls cond until it holds, failing the test after timeout
// (wait.Until, for a condition without an error).
func WaitUntil(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	wait.Until(t, what, timeout, wait.Bool(cond))
}

// PollUntil is WaitUntil looking every `every` (wait.Options.Every says
// why a test polls slowly).
func PollUntil(t testing.TB, what string, every, timeout time.Duration, cond func() bool) {
	t.Helper()
	wait.UntilWith(t, wait.Options{Every: every}, what, timeout, wait.Bool(cond))
}

// RequireRoot fails, never skips, a test that needs root: under
// `make integration` a test that cannot run must say so.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (loop devices, mounts, cgroups); run `make integration` as root (euid is %d)", os.Geteuid())
	}
}

// RequireCommand fails the test when a command is missing, naming the
// Debian package that provides it.
func RequireCommand(t testing.TB, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not found: install the Debian package %s (listed in .ci/packages.txt)", name, pkg)
	}
}

// RequireTool is the path of the command name, of the Debian package pkg,
// that a test checks against; unchecked says what goes unchecked without
// it. A missing one is MissingTool's to report.
func RequireTool(t testing.TB, name, pkg, unchecked string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		MissingTool(t, fmt.Sprintf("%s is not on PATH (%v): install the Debian package %s; NOT checked in this run: %s", name, err, pkg, unchecked))
	}
	return path
}

// MissingTool reports a tool a test needs and the machine lacks. `go test`
// must pass with Go alone, so it skips the test, loudly (a WARNING on
// stderr, which -v does not need to show); in CI (CI=true), which installs
// every such tool (.ci/packages.txt), it fails the test instead, so that
// nothing ships unchecked.
func MissingTool(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, "WARNING: "+msg)
	t.Skip(msg)
}

// Run runs a command and returns its trimmed output, failing the test on
// error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Loop is a file system on a loop device.
type Loop struct {
	// Mount is where it is mounted.
	Mount string
	// Device is the loop device, e.g. /dev/loop3.
	Device string
	// DevNum is its "major:minor", as cgroup I/O throttles name devices.
	DevNum string
}

// MountLoop creates a size-byte file system of fstype (ext4 or xfs) on a
// loop device with direct I/O to its fully written backing file, so the host's
// page cache does not flatter the numbers, and mounts it with mountOpts.
// Cleanup unmounts it and detaches the device even when the test fails.
func MountLoop(t testing.TB, fstype string, size int64, mountOpts ...string) Loop {
	t.Helper()
	return MountLoopIn(t, t.TempDir(), fstype, size, mountOpts...)
}

// MemoryDir returns a new directory in RAM (/dev/shm). It is removed after
// every cleanup registered later, such as a loop device backed there. A
// loop device backed in RAM measures steadily where the VM's virtual disk,
// whose speed the host moves, drifts by ±40% within minutes.
func MemoryDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "plateau-test-")
	if err != nil {
		t.Fatalf("directory in RAM: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// MountLoopIn is MountLoop with the backing file and mount point in dir,
// which must outlive the test's cleanups of the loop device.
func MountLoopIn(t testing.TB, dir, fstype string, size int64, mountOpts ...string) Loop {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "losetup", "util-linux")
	RequireCommand(t, "mkfs."+fstype, map[string]string{"ext4": "e2fsprogs", "xfs": "xfsprogs"}[fstype])
	img := filepath.Join(dir, fstype+".img")
	if err := writeImage(img, size); err != nil {
		t.Fatal(err)
	}
	l := Loop{Device: Run(t, "losetup", "--find", "--show", "--direct-io=on", img)}
	t.Cleanup(func() {
		out, err := exec.Command("losetup", "-d", l.Device).CombinedOutput()
		// What matters is that the device no longer holds our image: a
		// detach can find it already released, which is not a leak.
		if err != nil && loopBackingFile(l.Device) == img {
			t.Errorf("losetup -d %s: %v: %s", l.Device, err, out)
		}
	})
	dev, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(l.Device), "dev"))
	if err != nil {
		t.Fatal(err)
	}
	l.DevNum = strings.TrimSpace(string(dev))
	// No discard at mkfs: on a loop device it punches holes in the
	// backing file and undoes writeImage. No lazy init: ext4's background
	// zeroing would disturb the measurements.
	switch fstype {
	case "ext4":
		Run(t, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", l.Device)
	case "xfs":
		Run(t, "mkfs.xfs", "-q", "-f", "-K", l.Device)
	default:
		t.Fatalf("MountLoop: no mkfs options for %s", fstype)
	}
	if alloc := allocatedBytes(img); alloc < size {
		t.Fatalf("loop image %s has %d of its %d bytes allocated after mkfs: something punched holes into it", img, alloc, size)
	}
	l.Mount = filepath.Join(dir, "mnt")
	if err := os.Mkdir(l.Mount, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"-t", fstype}
	if len(mountOpts) > 0 {
		args = append(args, "-o", strings.Join(mountOpts, ","))
	}
	Run(t, "mount", append(args, l.Device, l.Mount)...)
	t.Cleanup(func() { Unmount(t, l.Mount) })
	return l
}

// writeImage writes size bytes of zeros to a new file at path and syncs
// it. The image must not be sparse: on a sparse file the first write to
// each block pays the host file system's allocation (tmpfs: a page), so a
// baseline characterized on a fresh device ran at a fraction of the rate
// the same device reached a minute later (seq write 2.4x faster in the
// daemon than in characterize on a fresh CI machine). fallocate is not enough either:
// on ext4 it leaves unwritten extents that the first write converts.
func writeImage(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	zeros := make([]byte, 4<<20)
	for left := size; left > 0; {
		n := int64(len(zeros))
		if left < n {
			n = left
		}
		if _, err := f.Write(zeros[:n]); err != nil {
			f.Close()
			return fmt.Errorf("writing the loop image %s: %w", path, err)
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing the loop image %s: %w", path, err)
	}
	return f.Close()
}

// allocatedBytes is the space the host file system holds for a file.
func allocatedBytes(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// loopBackingFile is the file a loop device is bound to, or "" when free.
func loopBackingFile(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// MountTmpfs mounts a private tmpfs of the given size ("256m").
func MountTmpfs(t testing.TB, size string) string {
	t.Helper()
	RequireRoot(t)
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, "mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", mnt)
	t.Cleanup(func() { Unmount(t, mnt) })
	return mnt
}

// Unmount retries while something still holds the mount (a worker being
// killed), then detaches it lazily, so no test leaves a mount behind.
func Unmount(t testing.TB, mnt string) {
	for i := 0; i < 50; i++ {
		if exec.Command("umount", mnt).Run() == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount -l %s: %v: %s", mnt, err, out)
	}
}

// LogBuffer collects a daemon's stderr while a test reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
