//go:build integration

package collector

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// requireSudo fails the test, rather than skipping it, when the machine
// cannot run it: the integration suite is meant to run everything.
func requireSudo(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root, so that 'sudo -n' runs without a password; run it through 'make integration' as root")
	}
	if _, err := exec.LookPath("sudo"); err != nil {
		t.Fatal("this test needs sudo (Debian package sudo, listed in .ci/packages.txt)")
	}
}

// processesRunning lists the live processes whose command line contains
// marker.
func processesRunning(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			continue // exited, waiting to be reaped
		}
		pids = append(pids, pid)
	}
	return pids
}

func TestGPFSThroughSudoIntegration(t *testing.T) {
	requireSudo(t)
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.sudo, cfg.requestsFile = true, writeRequestFile(t)
	// sudo resets the environment, so the fake commands read the fixtures
	// next to themselves.
	file := filepath.Join("fixtures", "expected", "gpfs.prom")
	compareWithFile(t, newTestRegistry("gpfs", newTestGPFS(t, cfg), nil), file, metricNames(t, file)...)
}

// The diagnosis commands through sudo: each runs with its fixed command
// line (the fakes refuse any other) and answers as without sudo.
func TestGPFSDiagnosisThroughSudoIntegration(t *testing.T) {
	requireSudo(t)
	cfg := fakeGPFSDiag(t, 30*time.Second)
	cfg.sudo, cfg.requestsFile = true, writeRequestFile(t)
	file := filepath.Join("fixtures", "expected", "gpfs_diag.prom")
	compareWithFile(t, newTestRegistry("gpfs", newTestGPFS(t, cfg), nil), file, metricNames(t, file)...)
}

// A hung mmlsdisk run through sudo is killed with its whole process group
// at its deadline, like mmpmon below, and leaves no process behind.
func TestGPFSHungMmlsdiskThroughSudoIntegration(t *testing.T) {
	requireSudo(t)
	dir := t.TempDir()
	copyGPFSFixture(t, dir, "mmlsdisk", "mmpmon-hang", 0o755)
	hang := filepath.Join(dir, "mmlsdisk")
	t.Cleanup(func() {
		for _, pid := range processesRunning(hang) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	})
	const timeout = 2 * time.Second
	cfg := fakeGPFSDiag(t, timeout)
	cfg.mmlsdiskPath, cfg.sudo, cfg.requestsFile = hang, true, writeRequestFile(t)
	c := newTestGPFS(t, cfg)
	start := time.Now()
	_, err := collectAll(c)
	checkTimedOut(t, err, time.Since(start), timeout, "mmlsdisk's timeout")
	probetest.WaitUntil(t, "every process of the hung mmlsdisk to be gone", 10*time.Second, func() bool {
		return len(processesRunning(hang)) == 0
	})
}

// A signal to sudo is not passed on to a child that cannot catch it, so a
// hung command run through sudo is only ended by killing its whole process
// group. The fake is copied to a unique path to find its processes.
func TestGPFSHungThroughSudoIntegration(t *testing.T) {
	requireSudo(t)
	dir := t.TempDir()
	copyGPFSFixture(t, dir, "mmpmon", "mmpmon-hang", 0o755)
	hang := filepath.Join(dir, "mmpmon")
	var groups []int
	t.Cleanup(func() {
		for _, pid := range processesRunning(hang) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		for _, g := range groups {
			if !processGroupGone(g) {
				killGroup(g)
			}
		}
	})

	const timeout = 2 * time.Second
	cfg := fakeGPFS(t, "mmpmon", timeout)
	cfg.mmpmonPath, cfg.sudo, cfg.requestsFile = hang, true, writeRequestFile(t)
	c := newTestGPFS(t, cfg)

	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := collectAll(c)
		done <- err
	}()
	// The shell running the script may be in sudo's process group or,
	// with sudo's use_pty, in a session of its own; its group holds the
	// sleep child that keeps stdout open.
	probetest.WaitUntil(t, "the hung mmpmon to start under sudo", 10*time.Second, func() bool {
		for _, pid := range processesRunning(hang) {
			if g, err := unix.Getpgid(pid); err == nil {
				groups = append(groups, g)
			}
		}
		return len(groups) > 0
	})
	err := <-done
	checkTimedOut(t, err, time.Since(start), timeout, "a timeout")
	probetest.WaitUntil(t, "every process of the hung command to be gone", 10*time.Second, func() bool {
		for _, g := range groups {
			if !processGroupGone(g) {
				return false
			}
		}
		return len(processesRunning(hang)) == 0
	})
}

// writeRequestFile writes the request file sudo mode needs, as the RPM
// ships it for an NSD server.
func writeRequestFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "mmpmon-nsd.requests")
	if err := os.WriteFile(f, []byte("fs_io_s\nnsd_ds\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkTimedOut checks an Update whose command hung through sudo: it
// failed with the command's timeout (want says which, for the message)
// and returned within the timeout, the grace before a group is abandoned,
// and slack for a loaded machine.
func checkTimedOut(t *testing.T, err error, elapsed, timeout time.Duration, want string) {
	t.Helper()
	if !errors.Is(err, errCommandTimeout) {
		t.Fatalf("Update error = %v, want %s", err, want)
	}
	if limit := timeout + abandonAfter + 3*time.Second; elapsed > limit {
		t.Errorf("Update took %s, want under %s", elapsed, limit)
	}
}
