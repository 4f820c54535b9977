package faultfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
)

// Check reports why this process cannot mount a faultfs, or nil when it
// can: it needs root (mount(2) and the allow_other option), a /dev/fuse
// it can open, and a kernel with FUSE. Root-only tests call it (through
// MountForTest) and fail, not skip, with its message.
func Check() error {
	var problems []error
	if os.Geteuid() != 0 {
		problems = append(problems, fmt.Errorf("not root (euid %d): mounting FUSE directly needs CAP_SYS_ADMIN; run `make integration` as root", os.Geteuid()))
	}
	if fi, err := os.Stat("/dev/fuse"); err != nil {
		problems = append(problems, fmt.Errorf("/dev/fuse: %w (load the fuse module, or pass --device /dev/fuse to the container)", err))
	} else if fi.Mode()&os.ModeCharDevice == 0 {
		problems = append(problems, fmt.Errorf("/dev/fuse is not a character device (mode %s)", fi.Mode()))
	} else if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		problems = append(problems, fmt.Errorf("cannot open /dev/fuse: %w", err))
	} else {
		f.Close()
	}
	if fss, err := os.ReadFile("/proc/filesystems"); err != nil {
		problems = append(problems, fmt.Errorf("reading the kernel's file systems: %w", err))
	} else if !bytes.Contains(fss, []byte("\tfuse\n")) {
		problems = append(problems, errors.New("the kernel lists no fuse file system in /proc/filesystems (modprobe fuse)"))
	}
	if len(problems) > 0 {
		return fmt.Errorf("faultfs cannot mount here: %w", errors.Join(problems...))
	}
	return nil
}

// MountForTest mounts a faultfs for t and unmounts it in t's cleanup,
// which runs before the cleanup of any t.TempDir made earlier, so the
// directories are removed only once the mount is gone. An empty backing
// or mountPoint gets a fresh t.TempDir. It fails t (never skips) when
// Check finds a missing prerequisite.
//
// Register the cleanup of child processes that use the mount after
// calling MountForTest, so they are killed before the unmount; Unmount
// copes either way, but needs a few seconds when users remain.
func MountForTest(t testing.TB, backing, mountPoint string, opts Options) *FS {
	t.Helper()
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	if backing == "" {
		backing = t.TempDir()
	}
	if mountPoint == "" {
		mountPoint = t.TempDir()
	}
	f, err := Mount(backing, mountPoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return f
}
