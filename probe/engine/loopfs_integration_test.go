//go:build integration

package engine_test

import (
	"testing"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// The root-only tests of this package mount real file systems through
// probetest; these names keep their call sites short.

func run(t *testing.T, name string, args ...string) string { return probetest.Run(t, name, args...) }

// mountLoop mounts a fresh fstype file system of size bytes on a loop
// device and returns the mount point and the device.
func mountLoop(t *testing.T, fstype string, size int64, mountOpts ...string) (mnt, dev string) {
	t.Helper()
	l := probetest.MountLoop(t, fstype, size, mountOpts...)
	return l.Mount, l.Device
}

func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	return probetest.MountTmpfs(t, size)
}
