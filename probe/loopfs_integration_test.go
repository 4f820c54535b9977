//go:build integration

package probe

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Helpers for root-only tests on real block devices: a loop device over a
// sparse file, formatted and mounted for one test and torn down after it,
// even when the test fails.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("integration tests need root (loop devices, mounts); run `make integration` as root")
	}
}

func requireCommand(t *testing.T, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not found: install the Debian package %s", name, pkg)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// mountLoop creates a size-byte file system of fstype (ext4 or xfs) on a
// loop device with direct I/O to its backing file, so the host's page cache
// does not flatter the numbers, and returns its mount point.
func mountLoop(t *testing.T, fstype string, size int64, mountOpts ...string) (mnt, dev string) {
	t.Helper()
	requireRoot(t)
	requireCommand(t, "losetup", "util-linux")
	requireCommand(t, "mkfs."+fstype, map[string]string{"ext4": "e2fsprogs", "xfs": "xfsprogs"}[fstype])
	dir := t.TempDir()
	img := filepath.Join(dir, fstype+".img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dev = run(t, "losetup", "--find", "--show", "--direct-io=on", img)
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	switch fstype {
	case "ext4":
		// No lazy init: background zeroing would disturb the measurements.
		run(t, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev)
	default:
		run(t, "mkfs."+fstype, "-q", "-f", dev)
	}
	mnt = filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"-t", fstype}
	if len(mountOpts) > 0 {
		args = append(args, "-o", strings.Join(mountOpts, ","))
	}
	run(t, "mount", append(args, dev, mnt)...)
	t.Cleanup(func() { unmount(t, mnt) })
	return mnt, dev
}

// mountTmpfs mounts a private tmpfs of the given size.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	requireRoot(t)
	mnt := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", mnt)
	t.Cleanup(func() { unmount(t, mnt) })
	return mnt
}

// unmount retries while something still holds the mount, then detaches it
// lazily so a failing test never leaves a mount behind.
func unmount(t *testing.T, mnt string) {
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
