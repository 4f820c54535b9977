//go:build integration

package faultfs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// waitTimeout bounds every wait for the FS or a child to reach a state;
// the tests assert the state, never how fast it came.
const waitTimeout = 60 * time.Second

// inMount is the path p names below f's mount point; "" stays no path.
func inMount(f *FS, p string) string {
	if p == "" {
		return ""
	}
	return filepath.Join(f.MountPoint(), p)
}

// childHungInStat mounts an FS in Hang and has a child stat a file of it:
// when it returns, the child's stat is held in the FS.
func childHungInStat(t *testing.T) (*FS, *child) {
	t.Helper()
	f := MountForTest(t, "", "", Options{})
	c := startChild(t)
	writeBacking(t, f, "file", "content")
	f.Set(Hang())
	c.send(request{Op: "stat", Path: filepath.Join(f.MountPoint(), "file")})
	if err := f.WaitBlocked(timeoutCtx(t, waitTimeout), 1); err != nil {
		t.Fatal(err)
	}
	return f, c
}

func writeBacking(t *testing.T, f *FS, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.Backing(), name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPassThrough(t *testing.T) {
	f := MountForTest(t, "", "", Options{})
	c := startChild(t)
	mp := f.MountPoint()

	c.expect(request{Op: "open", ID: "a", Path: filepath.Join(mp, "new"), Flags: []string{"w", "creat", "excl"}}, "")
	c.expect(request{Op: "write", ID: "a", Data: "written through the mount"}, "")
	c.expect(request{Op: "fsync", ID: "a"}, "")
	c.expect(request{Op: "close", ID: "a"}, "")
	got, err := os.ReadFile(filepath.Join(f.Backing(), "new"))
	if err != nil || string(got) != "written through the mount" {
		t.Errorf("backing file after writing through the mount: %q, %v", got, err)
	}

	writeBacking(t, f, "old", "written to the backing directory")
	c.expect(request{Op: "open", ID: "b", Path: filepath.Join(mp, "old"), Flags: []string{"r"}}, "")
	if r := c.expect(request{Op: "read", ID: "b"}, ""); r.Data != "written to the backing directory" {
		t.Errorf("read through the mount: %q", r.Data)
	}
	c.expect(request{Op: "close", ID: "b"}, "")

	c.expect(request{Op: "mkdir", Path: filepath.Join(mp, "d")}, "")
	c.expect(request{Op: "rename", Path: filepath.Join(mp, "new"), To: filepath.Join(mp, "d", "moved")}, "")
	c.expect(request{Op: "chmod", Path: filepath.Join(mp, "d", "moved")}, "")
	if r := c.expect(request{Op: "readdir", Path: filepath.Join(mp, "d")}, ""); !slices.Equal(r.Names, []string{"moved"}) {
		t.Errorf("readdir through the mount: %q, want [moved]", r.Names)
	}
	if fi, err := os.Stat(filepath.Join(f.Backing(), "d", "moved")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backing file after rename and chmod through the mount: %v, %v", fi, err)
	}
	c.expect(request{Op: "statfs", Path: mp}, "")
	c.expect(request{Op: "unlink", Path: filepath.Join(mp, "d", "moved")}, "")
	c.expect(request{Op: "rmdir", Path: filepath.Join(mp, "d")}, "")
	if _, err := os.Stat(filepath.Join(f.Backing(), "d")); !os.IsNotExist(err) {
		t.Errorf("backing directory after rmdir through the mount: %v", err)
	}

	// Each of these must have been answered by the FS itself. If the
	// kernel had been given the backing file (FUSE passthrough), reads
	// and writes would bypass the daemon and no fault could be injected.
	for _, op := range []Op{OpLookup, OpCreate, OpWrite, OpFsync, OpFlush, OpRelease, OpOpen, OpRead,
		OpMkdir, OpRename, OpSetattr, OpOpendir, OpReaddir, OpReleasedir, OpStatfs, OpUnlink, OpRmdir} {
		if f.Count(op) == 0 {
			t.Errorf("the FS saw no %s request", op)
		}
	}
	if f.Blocked() != 0 || f.Interrupted() != 0 {
		t.Errorf("normal mode: %d blocked, %d interrupted requests", f.Blocked(), f.Interrupted())
	}
}

// TestErrorModes proves each failing mode with real syscalls: the ones
// the mode must fail get its errno, the others still work, and Normal
// brings the file system back.
func TestErrorModes(t *testing.T) {
	type step struct {
		req   request
		errno string
	}
	// Paths are relative to the mount point. Every case starts with
	// "file" (containing "content") in the backing directory and with
	// descriptor "pre" opened read-write on it before the mode is set.
	cases := []struct {
		mode  Mode
		steps []step
	}{
		{FailReadEIO(), []step{
			{request{Op: "read", ID: "pre"}, "EIO"},
			{request{Op: "open", ID: "r", Path: "file", Flags: []string{"r"}}, ""},
			{request{Op: "read", ID: "r"}, "EIO"},
			{request{Op: "readdir", Path: "."}, "EIO"},
			{request{Op: "stat", Path: "file"}, ""},
			{request{Op: "write", ID: "pre", Data: "x"}, ""},
			{request{Op: "create", Path: "new"}, ""},
		}},
		{FailWriteENOSPC(), []step{
			{request{Op: "write", ID: "pre", Data: "x"}, "ENOSPC"},
			{request{Op: "fsync", ID: "pre"}, "ENOSPC"},
			{request{Op: "create", Path: "new"}, "ENOSPC"},
			{request{Op: "mkdir", Path: "dir"}, "ENOSPC"},
			{request{Op: "read", ID: "pre"}, ""},
			{request{Op: "stat", Path: "file"}, ""},
			{request{Op: "readdir", Path: "."}, ""},
		}},
		{FailWriteEDQUOT(), []step{
			{request{Op: "write", ID: "pre", Data: "x"}, "EDQUOT"},
			{request{Op: "fsync", ID: "pre"}, "EDQUOT"},
			{request{Op: "create", Path: "new"}, "EDQUOT"},
			{request{Op: "read", ID: "pre"}, ""},
		}},
		{ReadOnly(), []step{
			{request{Op: "create", Path: "new"}, "EROFS"},
			{request{Op: "open", ID: "w", Path: "file", Flags: []string{"w"}}, "EROFS"},
			{request{Op: "open", ID: "t", Path: "file", Flags: []string{"r", "trunc"}}, "EROFS"},
			{request{Op: "write", ID: "pre", Data: "x"}, "EROFS"},
			{request{Op: "mkdir", Path: "dir"}, "EROFS"},
			{request{Op: "unlink", Path: "file"}, "EROFS"},
			{request{Op: "rename", Path: "file", To: "renamed"}, "EROFS"},
			{request{Op: "chmod", Path: "file"}, "EROFS"},
			{request{Op: "open", ID: "r", Path: "file", Flags: []string{"r"}}, ""},
			{request{Op: "read", ID: "r"}, ""},
			{request{Op: "stat", Path: "file"}, ""},
		}},
		{Stale(), []step{
			{request{Op: "stat", Path: "file"}, "ESTALE"},
			{request{Op: "open", ID: "r", Path: "file", Flags: []string{"r"}}, "ESTALE"},
			{request{Op: "read", ID: "pre"}, "ESTALE"},
			{request{Op: "write", ID: "pre", Data: "x"}, "ESTALE"},
			{request{Op: "statfs", Path: "."}, "ESTALE"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.mode.String(), func(t *testing.T) {
			f := MountForTest(t, "", "", Options{})
			c := startChild(t)
			writeBacking(t, f, "file", "content")
			c.expect(request{Op: "open", ID: "pre", Path: inMount(f, "file"), Flags: []string{"rw"}}, "")

			f.Set(tc.mode)
			for _, s := range tc.steps {
				req := s.req
				req.Path, req.To = inMount(f, req.Path), inMount(f, req.To)
				c.expect(req, s.errno)
			}

			f.Set(Normal())
			c.expect(request{Op: "stat", Path: inMount(f, "file")}, "")
			c.expect(request{Op: "create", Path: inMount(f, "after")}, "")
			if r := c.expect(request{Op: "read", ID: "pre"}, ""); r.Data == "" {
				t.Error("read after returning to normal: no data")
			}
		})
	}
}

// TestDirectIO shows why the option exists: a read on a descriptor whose
// data the kernel cached would not reach the FS, but with DirectIO every
// read meets the current mode.
func TestDirectIO(t *testing.T) {
	f := MountForTest(t, "", "", Options{DirectIO: true})
	c := startChild(t)
	writeBacking(t, f, "file", "content")
	c.expect(request{Op: "open", ID: "r", Path: filepath.Join(f.MountPoint(), "file"), Flags: []string{"r"}}, "")
	if r := c.expect(request{Op: "read", ID: "r"}, ""); r.Data != "content" {
		t.Fatalf("first read: %q", r.Data)
	}
	f.Set(FailReadEIO())
	c.expect(request{Op: "read", ID: "r"}, "EIO")
}

// TestHangSIGKILL makes a child hang in each kind of operation, proves it
// is stuck (the FS holds its request and it does not answer), SIGKILLs
// it, and requires it to die: the FS must answer the kernel's interrupt.
func TestHangSIGKILL(t *testing.T) {
	cases := []struct {
		name string
		mode Mode
		// setup runs before the mode is set; hang is the request that
		// must block.
		setup []request
		hang  request
	}{
		{name: "stat", mode: Hang(), hang: request{Op: "stat", Path: "file"}},
		{name: "open", mode: Hang(), hang: request{Op: "open", ID: "x", Path: "file", Flags: []string{"r"}}},
		{name: "create", mode: Hang(), hang: request{Op: "create", Path: "new"}},
		{name: "read", mode: Hang(),
			setup: []request{{Op: "open", ID: "fd", Path: "file", Flags: []string{"r"}}},
			hang:  request{Op: "read", ID: "fd"}},
		{name: "write", mode: Hang(),
			setup: []request{{Op: "open", ID: "fd", Path: "file", Flags: []string{"w"}}},
			hang:  request{Op: "write", ID: "fd", Data: "x"}},
		{name: "fsync", mode: Hang(),
			setup: []request{{Op: "open", ID: "fd", Path: "file", Flags: []string{"w"}}},
			hang:  request{Op: "fsync", ID: "fd"}},
		{name: "flush", mode: Hang(),
			setup: []request{{Op: "open", ID: "fd", Path: "file", Flags: []string{"w"}}},
			hang:  request{Op: "close", ID: "fd"}},
		{name: "setattr", mode: Hang(), hang: request{Op: "chmod", Path: "file"}},
		{name: "mkdir", mode: Hang(), hang: request{Op: "mkdir", Path: "dir"}},
		{name: "unlink", mode: Hang(), hang: request{Op: "unlink", Path: "file"}},
		{name: "rmdir", mode: Hang(), hang: request{Op: "rmdir", Path: "sub"}},
		{name: "readdir", mode: Hang(), hang: request{Op: "readdir", Path: "sub"}},
		{name: "statfs", mode: Hang(), hang: request{Op: "statfs", Path: "."}},
		{name: "latency", mode: Latency(time.Hour), hang: request{Op: "stat", Path: "file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := MountForTest(t, "", "", Options{})
			c := startChild(t)
			writeBacking(t, f, "file", "content")
			if err := os.Mkdir(filepath.Join(f.Backing(), "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, req := range tc.setup {
				req.Path = inMount(f, req.Path)
				c.expect(req, "")
			}

			f.Set(tc.mode)
			req := tc.hang
			req.Path = inMount(f, req.Path)
			c.send(req)
			ctx := timeoutCtx(t, waitTimeout)
			if err := f.WaitBlocked(ctx, 1); err != nil {
				t.Fatalf("the child's %s never reached the FS: %v", tc.name, err)
			}
			select {
			case r := <-c.replies:
				t.Fatalf("%s answered (%+v) while the FS was in %s", tc.name, r, tc.mode)
			default:
			}
			before := f.Interrupted()
			if err := c.kill(ctx); err != nil {
				t.Fatal(err)
			}
			if f.Interrupted() <= before {
				t.Errorf("the child died, but the FS saw no interrupted request (%d before, %d after)", before, f.Interrupted())
			}
		})
	}
}

// TestReleaseAfterHang: the background release of a killed child's file
// hangs too (no process waits for it), Release lets it and a new
// caller's request through, and the FS keeps working.
func TestReleaseAfterHang(t *testing.T) {
	f := MountForTest(t, "", "", Options{})
	writeBacking(t, f, "file", "content")
	file := filepath.Join(f.MountPoint(), "file")
	ctx := timeoutCtx(t, waitTimeout)

	first := startChild(t)
	first.expect(request{Op: "open", ID: "fd", Path: file, Flags: []string{"r"}}, "")
	f.Set(Hang())
	first.send(request{Op: "stat", Path: file})
	if err := f.WaitBlocked(ctx, 1); err != nil {
		t.Fatal(err)
	}
	releasesBefore := f.Count(OpRelease)
	if err := first.kill(ctx); err != nil {
		t.Fatal(err)
	}
	// Exiting closed the descriptor: its flush was interrupted with
	// the rest, but the kernel sends RELEASE in the background and
	// that request waits in the FS.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for f.Count(OpRelease) == releasesBefore {
		select {
		case <-ctx.Done():
			t.Fatalf("release of the killed child's file never reached the FS: %v", ctx.Err())
		case <-tick.C:
		}
	}
	if err := f.WaitBlocked(ctx, 1); err != nil {
		t.Fatalf("the release is not waiting in the hang: %v", err)
	}

	second := startChild(t)
	second.send(request{Op: "stat", Path: file})
	if err := f.WaitBlocked(ctx, 2); err != nil {
		t.Fatalf("second child not stuck: %v", err)
	}
	f.Release()
	if r := second.next("stat after Release"); r.Errno != "" {
		t.Errorf("stat released from the hang: %s", r.Errno)
	}
	if err := f.WaitUnblocked(ctx); err != nil {
		t.Fatal(err)
	}
	second.expect(request{Op: "create", Path: filepath.Join(f.MountPoint(), "after")}, "")
	if f.Mode() != Normal() {
		t.Errorf("mode after Release: %s", f.Mode())
	}
}

// TestSetWakesHungRequests: a request waiting in Hang decides again under
// the new mode, so switching to Stale fails it instead of letting it in.
func TestSetWakesHungRequests(t *testing.T) {
	f, c := childHungInStat(t)
	f.Set(Stale())
	if r := c.next("stat after switching from hang to stale"); r.Errno != "ESTALE" {
		t.Errorf("stat after switching from hang to stale: %q, want ESTALE", r.Errno)
	}
}

func TestLatency(t *testing.T) {
	const d = 100 * time.Millisecond
	f := MountForTest(t, "", "", Options{})
	c := startChild(t)
	writeBacking(t, f, "file", "content")
	file := filepath.Join(f.MountPoint(), "file")
	c.expect(request{Op: "open", ID: "fd", Path: file, Flags: []string{"rw"}}, "")

	f.Set(Latency(d))
	for _, req := range []request{
		{Op: "stat", Path: file},
		{Op: "write", ID: "fd", Data: "slow"},
		{Op: "fsync", ID: "fd"},
		{Op: "create", Path: filepath.Join(f.MountPoint(), "new")},
	} {
		// Only a lower bound: a loaded machine may add any amount.
		if r := c.expect(req, ""); time.Duration(r.Nanos) < d {
			t.Errorf("%s took %s under %s", req.Op, time.Duration(r.Nanos), f.Mode())
		}
	}
	got, err := os.ReadFile(filepath.Join(f.Backing(), "file"))
	if err != nil || string(got) != "slowent" {
		t.Errorf("backing file after slow write: %q, %v", got, err)
	}
}

// signalEveryThread sends sig to each thread of process pid. A signal
// sent to the process goes to one thread of the kernel's choosing, most
// often the first, while the Go runtime may have the goroutine that waits
// in the FS on another: with kill(2), one test run in three never
// interrupted the wait.
func signalEveryThread(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		// A thread that exited meanwhile is no failure.
		if err := syscall.Tgkill(pid, tid, sig); err != nil && err != syscall.ESRCH {
			t.Fatalf("tgkill %d %d: %v", pid, tid, err)
		}
	}
}

// TestSignalDuringTheFlushOfACreate: a signal the caller catches
// interrupts the slow flush of the close that ends a create. The create
// itself succeeded, so it must not be redone: redone with O_EXCL it
// fails with EEXIST, as TestLatency once did in CI. The signal is
// SIGURG, which every Go process catches (the runtime preempts
// goroutines with it), so the child needs no handler of its own.
func TestSignalDuringTheFlushOfACreate(t *testing.T) {
	f := MountForTest(t, "", "", Options{})
	c := startChild(t)
	ctx := timeoutCtx(t, waitTimeout)
	// The signal must land while the flush waits out its delay; a
	// loaded machine may miss a short one, so each attempt waits longer.
	delays := []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second}
	for i, delay := range delays {
		attempt := i + 1
		f.Set(Latency(delay))
		flushes, interrupted := f.Count(OpFlush), f.Interrupted()
		name := fmt.Sprintf("new-%d", attempt)
		c.send(request{Op: "create", Path: filepath.Join(f.MountPoint(), name)})
		// A request is counted and blocked in one step of the gate.
		for f.Count(OpFlush) == flushes {
			select {
			case <-ctx.Done():
				t.Fatalf("attempt %d: the close of the created file never reached the FS: %v", attempt, ctx.Err())
			case <-time.After(2 * time.Millisecond):
			}
		}
		signalEveryThread(t, c.cmd.Process.Pid, syscall.SIGURG)
		r := c.next("create " + name)
		if f.Interrupted() == interrupted {
			t.Logf("attempt %d: the flush ended before the signal came; again, slower", attempt)
			continue
		}
		if r.Errno != "" {
			t.Errorf("create %s, its flush interrupted by a caught signal: got %s, want success", name, r.Errno)
		}
		if _, err := os.Stat(filepath.Join(f.Backing(), name)); err != nil {
			t.Errorf("the created file is not in the backing directory: %v", err)
		}
		return
	}
	t.Fatalf("in %d attempts the signal never reached a waiting flush", len(delays))
}

// TestLazyUnmount: the file system vanishes under a running user, who
// keeps the descriptor it had, and is gone for good once it lets go.
func TestLazyUnmount(t *testing.T) {
	f := MountForTest(t, "", "", Options{})
	c := startChild(t)
	writeBacking(t, f, "file", "still readable")
	file := filepath.Join(f.MountPoint(), "file")
	c.expect(request{Op: "open", ID: "fd", Path: file, Flags: []string{"r"}}, "")

	if err := f.LazyUnmount(); err != nil {
		t.Fatal(err)
	}
	if mounted, err := IsMounted(f.MountPoint()); err != nil || mounted {
		t.Fatalf("after LazyUnmount: mounted=%v, %v", mounted, err)
	}
	c.expect(request{Op: "stat", Path: file}, "ENOENT")
	if r := c.expect(request{Op: "read", ID: "fd"}, ""); r.Data != "still readable" {
		t.Errorf("read on a descriptor opened before the lazy unmount: %q", r.Data)
	}
	select {
	case <-f.Done():
		t.Fatal("the FS stopped serving while a descriptor was still open")
	default:
	}
	c.expect(request{Op: "close", ID: "fd"}, "")
	select {
	case <-f.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("the FS still serving %s after its last user closed", waitTimeout)
	}
	if err := f.Unmount(); err != nil {
		t.Errorf("Unmount after LazyUnmount: %v", err)
	}
	if err := f.LazyUnmount(); err == nil {
		t.Error("a second LazyUnmount succeeded")
	}
}

// TestUnmountWhileHung is what every test's cleanup relies on: Unmount
// ends a hang first, so the stuck caller completes and the unmount works.
func TestUnmountWhileHung(t *testing.T) {
	f, c := childHungInStat(t)
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	if r := c.next("stat released by Unmount"); r.Errno != "" {
		t.Errorf("stat released by Unmount: %s", r.Errno)
	}
	if mounted, err := IsMounted(f.MountPoint()); err != nil || mounted {
		t.Errorf("after Unmount: mounted=%v, %v", mounted, err)
	}
}

// TestUnmountBusy: a user that keeps a file open cannot stop Unmount,
// which detaches the mount and then aborts the connection, so the user's
// descriptor fails with ENOTCONN instead of holding the FS forever.
func TestUnmountBusy(t *testing.T) {
	f := MountForTest(t, "", "", Options{})
	c := startChild(t)
	writeBacking(t, f, "file", "content")
	c.expect(request{Op: "open", ID: "fd", Path: filepath.Join(f.MountPoint(), "file"), Flags: []string{"r"}}, "")

	done := make(chan error, 1)
	go func() { done <- f.Unmount() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("Unmount of a busy mount still running after %s", waitTimeout)
	}
	select {
	case <-f.Done():
	default:
		t.Error("Unmount returned while the FS was still serving")
	}
	if mounted, err := IsMounted(f.MountPoint()); err != nil || mounted {
		t.Errorf("after Unmount: mounted=%v, %v", mounted, err)
	}
	c.expect(request{Op: "read", ID: "fd"}, "ENOTCONN")
}
