//go:build integration

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/faultfs"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// timeoutStopSec is the packaged unit's TimeoutStopSec: past it systemd
// SIGKILLs the daemon, and a probe's files stay behind.
const timeoutStopSec = 30 * time.Second

// hungTargetsConfig is a config with eight targets on one faultfs mount
// (their probes far from their slot, so only the daemon's own path checks
// touch them) and, when local is set, a metadata probe on a local
// directory that runs every few seconds and creates many files.
func hungTargetsConfig(t *testing.T, f *faultfs.FS, local string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("defaults:\n  splay: false\ntargets:\n")
	for i := 0; i < 8; i++ {
		if err := os.Mkdir(filepath.Join(f.Backing(), fmt.Sprintf("t%d", i)), 0o700); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  - name: hung%d\n    path: %s/t%d\n    probes:\n      - {name: md, kind: metadata, workers: 1, files: 16, file_size: 0, interval: 24h, timeout: 1m}\n", i, f.MountPoint(), i)
	}
	if local != "" {
		fmt.Fprintf(&b, "  - name: local\n    path: %s\n    probes:\n      - {name: md, kind: metadata, workers: 2, files: 100000, file_size: 0, interval: 2s, timeout: 1500ms}\n", local)
	}
	return writeFaultConfig(t, b.String())
}

// SIGTERM (systemctl stop) while a SIGHUP reload is blocked on a hung
// mount with eight targets on it: the daemon exits within TimeoutStopSec
// and the probe running on another target at that instant leaves no file.
// Meanwhile POSTs to /-/reload are answered at once, not parked.
func TestDaemonHostileSIGTERMDuringHungReload(t *testing.T) {
	requireRoot(t)
	bin := buildDaemon(t)
	f := mountFault(t, faultfs.Options{})
	local := t.TempDir()
	d := startFaultDaemon(t, bin, hungTargetsConfig(t, f, local))
	probeDir := filepath.Join(local, hostname)
	waitFor(t, "a run on the local target creating files", func() bool {
		_, err := os.Stat(probeDir)
		return err == nil && len(runDirs(t, probeDir)) > 0
	})
	f.Set(faultfs.Hang())
	defer f.Release()
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.WaitBlocked(ctx, 1); err != nil {
		t.Fatalf("the reload's path check never reached the hung mount: %v", err)
	}
	// POST /-/reload while the reload hangs answers at once and parks no
	// goroutine behind it. The local target's probe runs every 2 s and a
	// run holds a few goroutines while it lasts (the worker's pipes, its
	// wait, the run's timer): the fewest of several samples is what stays,
	// so a run in flight at one sample is not taken for parked requests.
	before := d.fewestGoroutines()
	quick := &http.Client{Timeout: 2 * time.Second}
	busy := 0
	for i := 0; i < 30; i++ {
		resp, err := quick.Post(d.url+"/-/reload", "", nil)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			busy++
		}
	}
	after := d.fewestGoroutines()
	t.Logf("30 POST /-/reload during the hung reload: %d answered 503 at once; goroutines %v -> %v", busy, before, after)
	// One parked goroutine per POST would be 30 more.
	if busy != 30 || after > before+5 {
		t.Errorf("POST /-/reload during a hung reload: %d of 30 answered 503 at once, goroutines %v -> %v", busy, before, after)
	}
	// A run is in flight on the local target when the stop comes.
	waitFor(t, "a run on the local target in flight", func() bool { return len(runDirs(t, probeDir)) > 0 })
	d.exitsOnTERM(t, "with a reload blocked on the hung mount")
	if left := runDirs(t, probeDir); len(left) > 0 {
		t.Errorf("the stop left probe files on the local target: %v", left)
	}
	for i := 0; i < 8; i++ {
		if left := entries(t, filepath.Join(f.Backing(), fmt.Sprintf("t%d", i))); len(left) > 0 {
			t.Errorf("probe files on hung target %d: %v", i, left)
		}
	}
}

// A daemon starting with eight targets on a hung mount answers /metrics
// at once (its own metrics) and says it is not ready until the path
// checks are done; SIGHUP then is no harm either.
func TestDaemonHostileSlowStartAnswers(t *testing.T) {
	requireRoot(t)
	bin := buildDaemon(t)
	f := mountFault(t, faultfs.Options{})
	cfg := hungTargetsConfig(t, f, "")
	f.Set(faultfs.Hang())
	defer f.Release()
	addr := probetest.FreeAddr(t)
	d := startFaultDaemonNoWait(t, bin, cfg, addr)
	start := time.Now()
	client := &http.Client{Timeout: 2 * time.Second}
	var metricsAt time.Duration
	waitForWithin(t, "/metrics during the start", 40*time.Second, func() bool {
		resp, err := client.Get(d.url + "/metrics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		metricsAt = time.Since(start)
		return resp.StatusCode == http.StatusOK
	})
	resp, err := client.Get(d.url + "/-/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("/metrics answered %s after start; /-/ready %d", metricsAt.Round(time.Millisecond), resp.StatusCode)
	if metricsAt > 10*time.Second {
		t.Errorf("/metrics first answered %s after start", metricsAt)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/-/ready during the start: HTTP %d, want 503", resp.StatusCode)
	}
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	f.Release()
	waitForWithin(t, "ready after the mount is back", 60*time.Second, func() bool {
		resp, err := client.Get(d.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// The worst stop: a worker blocked on the hung mount ignores SIGTERM (its
// clean-up would block too). It gets its grace, then SIGKILL (FUSE waits
// are killable), and the daemon still exits within TimeoutStopSec.
func TestDaemonHostileSIGTERMWorkerOnHungMount(t *testing.T) {
	requireRoot(t)
	bin := buildDaemon(t)
	f := mountFault(t, faultfs.Options{})
	cfg := oneTargetConfig(t, "hung", f.MountPoint(), "{name: md, kind: metadata, workers: 1, files: 100000, file_size: 0, interval: 30s, timeout: 29s}")
	d := startFaultDaemon(t, bin, cfg)
	waitFor(t, "a worker running", func() bool { return len(children(d.pid())) > 0 })
	f.Set(faultfs.Hang())
	defer f.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.WaitBlocked(ctx, 1); err != nil {
		t.Fatalf("the worker never blocked on the hung mount: %v", err)
	}
	d.exitsOnTERM(t, "with its worker blocked on the hung mount")
}

// fewestGoroutines is the daemon's go_goroutines, the fewest of six
// scrapes 500 ms apart: 2.5 s, more than the local probe's 2 s interval,
// so what persists, not what a probe run holds for a moment.
func (d *faultDaemon) fewestGoroutines() float64 {
	d.t.Helper()
	fewest := d.metrics().value(d.t, "go_goroutines")
	for i := 0; i < 5; i++ {
		time.Sleep(500 * time.Millisecond)
		fewest = min(fewest, d.metrics().value(d.t, "go_goroutines"))
	}
	return fewest
}
