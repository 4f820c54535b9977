//go:build integration

package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/privsep"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// capsUser is the system user the capability test runs the daemon as; it
// is created for the test when missing and removed afterwards.
const capsUser = "plateau-captest"

// capsWait bounds each wait of the capability test; generous for a loaded
// 2-core machine, the test asserts what happens, not how fast.
const capsWait = 90 * time.Second

// TestIntegrationCapabilitiesSeparated runs the real daemon as a user other
// than root given ambient CAP_SYS_ADMIN, as the packaged unit does
// (AmbientCapabilities=, CapabilityBoundingSet=, NoNewPrivileges=), and
// reads /proc/<pid>/status of each process: the daemon, which serves HTTP,
// and a probe worker hold nothing; the SMART keeper and server hold
// CAP_SYS_ADMIN alone, effective and permitted. SMART requests reach the
// server and come back; a server killed is started again.
func TestIntegrationCapabilitiesSeparated(t *testing.T) {
	probetest.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed: %v", err)
	}
	uid, gid := capsTestUser(t)

	// Everything the user must reach lives under one directory it can
	// enter; t.TempDir's parents are 0700.
	base, err := os.MkdirTemp("", "plateau-caps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "plateau_exporter")
	// CGO_ENABLED=0 as the RPM builds it: only such a binary can change the
	// capabilities of all its threads (syscall.AllThreadsSyscall).
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	target := filepath.Join(base, "target")
	devDir := filepath.Join(base, "dev")
	for _, d := range []string{target, devDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(target, uid, gid); err != nil {
		t.Fatal(err)
	}
	// The fixture sysfs lists nvme0-nvme2 live. In the device directory
	// nvme0 is a symlink (refused: the server opens with O_NOFOLLOW), nvme1
	// a character device that is not a controller (/dev/null's numbers: the
	// Get Log Page ioctl fails with ENOTTY), nvme2 is missing.
	if err := os.Symlink("/dev/null", filepath.Join(devDir, "nvme0")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(devDir, "nvme1"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	// A stand-in mmpmon records the capability sets it was started with:
	// GPFS commands run from the daemon, like probe workers.
	gpfsOut := filepath.Join(base, "gpfs")
	if err := os.Mkdir(gpfsOut, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(gpfsOut, uid, gid); err != nil {
		t.Fatal(err)
	}
	mmpmon := filepath.Join(base, "mmpmon")
	script := "#!/bin/sh\ngrep ^Cap /proc/$$/status > " + filepath.Join(gpfsOut, "status.tmp") + " && mv " +
		filepath.Join(gpfsOut, "status.tmp") + " " + filepath.Join(gpfsOut, "status") + "\nexit 1\n"
	if err := os.WriteFile(mmpmon, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sysfs, err := filepath.Abs(filepath.Join("..", "..", "collector", "fixtures", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	// A probe every 10s whose worker lives about 6s of each 10: long
	// enough to be caught alive.
	config := filepath.Join(base, "plateau.yml")
	yaml := fmt.Sprintf(`defaults:
  interval: 10s
  timeout: 9s
  splay: false
targets:
  - name: caps
    path: %s
    probes:
      - {name: rand, kind: random, file_size: 16MiB, block_size: 4KiB, queue_depth: 4, duration: 3s}
`, target)
	if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}

	addr := probetest.FreeAddr(t)
	logs := &probetest.LogBuffer{}
	cmd := exec.Command(setpriv,
		"--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(gid), "--init-groups",
		"--bounding-set", "-all,+sys_admin", "--no-new-privs",
		"--inh-caps", "+sys_admin", "--ambient-caps", "+sys_admin",
		bin, "--config.file="+config, "--web.listen-address="+addr, "--log.level=debug",
		"--probe.hostname=captest", "--path.sysfs="+sysfs, "--collector.nvme.dev-dir="+devDir,
		"--collector.nvme.smart-timeout=1s", "--collector.gpfs.mmpmon-path="+mmpmon)
	cmd.Dir = base
	cmd.Stdout = logs
	cmd.Stderr = logs
	// Its own group, so that cleanup can kill the daemon and its helpers
	// together; probe workers have groups of their own and a parent-death
	// signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	daemon := cmd.Process.Pid // setpriv and the daemon's re-exec keep the pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = unix.Kill(daemon, unix.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
		}
		_ = unix.Kill(-daemon, unix.SIGKILL)
		<-exited
		// Keeper, server and workers leave once the daemon's sockets and
		// pipes close; the user is removed only when nothing runs as it.
		probetest.PollUntil(t, "every process of "+capsUser+" has exited", 50*time.Millisecond, capsWait, func() bool {
			left := processesOf(uid)
			for _, p := range left {
				_ = unix.Kill(p, unix.SIGKILL)
			}
			return len(left) == 0
		})
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})

	probetest.PollUntil(t, "the daemon answers /-/healthy", 100*time.Millisecond, capsWait, func() bool {
		select {
		case <-exited:
			t.Fatalf("daemon exited:\n%s", logs.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/-/healthy")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if args := cmdlineOf(daemon); !strings.Contains(args, "--collector.nvme.smart-helper-fd=") {
		t.Fatalf("daemon did not re-execute with the keeper's socket: %q\n%s", args, logs.String())
	}

	// The daemon names a server once the keeper has seen it ready, that
	// is after it dropped everything but CAP_SYS_ADMIN.
	var keeper, server int
	probetest.PollUntil(t, "the SMART keeper and server run", 50*time.Millisecond, capsWait, func() bool {
		keeper = childWith(daemon, "--role=keeper")
		servers := serversInUse(logs.String())
		if len(servers) > 0 {
			server = servers[0]
		}
		return keeper != 0 && server != 0
	})
	if p := childWith(keeper, "--role=server"); p != server {
		t.Fatalf("the daemon uses SMART server %d, the keeper's child is %d", server, p)
	}
	var worker int
	var workerCaps privsep.Sets
	probetest.PollUntil(t, "a probe worker is alive and read", 20*time.Millisecond, capsWait, func() bool {
		worker = childWith(daemon, "probe-worker")
		if worker == 0 {
			return false
		}
		s, err := privsep.ReadStatus(fmt.Sprintf("/proc/%d/status", worker))
		workerCaps = s
		return err == nil
	})

	check := func(what string, pid int, want privsep.Sets) {
		t.Helper()
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		paths := append([]string{fmt.Sprintf("/proc/%d/status", pid)}, tasks...)
		for i, p := range paths {
			s, err := privsep.ReadStatus(p)
			if err != nil {
				if i == 0 {
					t.Errorf("%s (pid %d): %v", what, pid, err)
				}
				continue // a thread that exited
			}
			if i == 0 {
				t.Logf("%s (pid %d): %s", what, pid, s)
			}
			s.Bounding = want.Bounding
			if s != want {
				t.Errorf("%s (pid %d) %s: %s, want %s", what, pid, p, s, want)
			}
		}
	}
	none := privsep.Sets{}
	adminOnly := privsep.Sets{Effective: privsep.MaskSysAdmin, Permitted: privsep.MaskSysAdmin}
	check("daemon", daemon, none)
	check("SMART keeper", keeper, adminOnly)
	check("SMART server", server, adminOnly)
	t.Logf("probe worker (pid %d): %s", worker, workerCaps)
	workerCaps.Bounding = 0
	if workerCaps != none {
		t.Errorf("probe worker (pid %d): %s, want no capability", worker, workerCaps)
	}

	var gpfsCaps privsep.Sets
	probetest.PollUntil(t, "the stand-in mmpmon ran", 200*time.Millisecond, capsWait, func() bool {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			resp.Body.Close()
		}
		s, err := privsep.ReadStatus(filepath.Join(gpfsOut, "status"))
		gpfsCaps = s
		return err == nil
	})
	t.Logf("GPFS command: %s", gpfsCaps)
	gpfsCaps.Bounding = 0
	if gpfsCaps != none {
		t.Errorf("GPFS command: %s, want no capability", gpfsCaps)
	}

	// SMART requests go through the server and come back with its errors.
	probetest.PollUntil(t, "the server's answers for nvme0 and nvme1 are logged", 200*time.Millisecond, capsWait, func() bool {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			resp.Body.Close()
		}
		l := logs.String()
		return strings.Contains(l, "device=nvme0") && strings.Contains(l, "too many levels of symbolic links") &&
			strings.Contains(l, "device=nvme1") && strings.Contains(l, "inappropriate ioctl for device")
	})

	// A server that dies is started again, with CAP_SYS_ADMIN alone.
	if err := unix.Kill(server, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var again int
	probetest.PollUntil(t, "the daemon uses a new SMART server", 50*time.Millisecond, capsWait, func() bool {
		servers := serversInUse(logs.String())
		again = servers[len(servers)-1]
		return again != server
	})
	if p := childWith(keeper, "--role=server"); p != again {
		t.Fatalf("the daemon uses SMART server %d, the keeper's child is %d", again, p)
	}
	check("restarted SMART server", again, adminOnly)
	check("daemon after the restart", daemon, none)
}

// capsTestUser returns the uid and gid of capsUser, creating the user (a
// system user without home or shell) if it does not exist; a user created
// here is removed when the test ends.
func capsTestUser(t *testing.T) (int, int) {
	t.Helper()
	u, err := user.Lookup(capsUser)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", capsUser).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd %s: %v\n%s", capsUser, err, out)
		}
		// Registered first, so it runs after the daemon's cleanup.
		t.Cleanup(func() {
			if out, err := exec.Command("userdel", capsUser).CombinedOutput(); err != nil {
				t.Errorf("userdel %s: %v\n%s", capsUser, err, out)
			}
		})
		if u, err = user.Lookup(capsUser); err != nil {
			t.Fatal(err)
		}
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		t.Fatal(err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		t.Fatal(err)
	}
	return uid, gid
}

// serversInUse lists the pids of the SMART servers the daemon logged it
// uses, in order.
func serversInUse(log string) []int {
	var pids []int
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="SMART helper running"`) {
			continue
		}
		_, v, _ := strings.Cut(line, " pid=")
		v, _, _ = strings.Cut(v, " ")
		if pid, err := strconv.Atoi(v); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cmdlineOf is a process's command line, arguments joined by spaces.
func cmdlineOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
}

// childWith returns a child of parent whose command line contains arg and
// that is not a zombie, or 0.
func childWith(parent int, arg string) int {
	if parent == 0 {
		return 0
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", parent))
	for _, task := range tasks {
		data, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil || !strings.Contains(cmdlineOf(pid), arg) {
				continue
			}
			if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(stat), ") Z ") {
				return pid
			}
		}
	}
	return 0
}

// processesOf lists the processes whose real uid is uid.
func processesOf(uid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
			pids = append(pids, pid)
		}
	}
	return pids
}
