package collector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

func TestCommandRunnerOutputAndStdin(t *testing.T) {
	r := newCommandRunner(false)
	out, err := r.run(context.Background(), []byte("fs_io_s\n"), "/bin/sh", "-c", "read req; echo \"got $req\"")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "got fs_io_s\n" {
		t.Errorf("output = %q", out)
	}
}

func TestCommandRunnerExitStatus(t *testing.T) {
	r := newCommandRunner(false)
	out, err := r.run(context.Background(), nil, "/bin/sh", "-c", "echo partial; echo 'daemon down' >&2; exit 3")
	var ce *commandError
	if !errors.As(err, &ce) {
		t.Fatalf("error = %v, want *commandError", err)
	}
	if ce.status != 3 || ce.stderr != "daemon down" {
		t.Errorf("got status %d stderr %q", ce.status, ce.stderr)
	}
	if string(out) != "partial\n" {
		t.Errorf("output = %q", out)
	}
	if !strings.Contains(err.Error(), "exited with status 3: daemon down") {
		t.Errorf("message %q does not explain the failure", err)
	}
}

func TestCommandRunnerMissingCommand(t *testing.T) {
	r := newCommandRunner(false)
	_, err := r.run(context.Background(), nil, filepath.Join(t.TempDir(), "nosuch"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v, want one wrapping ErrNotExist", err)
	}
	// A failed start must not leave the command marked as running.
	_, err = r.run(context.Background(), nil, filepath.Join(t.TempDir(), "nosuch"))
	if errors.Is(err, errStillRunning) {
		t.Error("a command that never started blocks the next run")
	}
}

func TestCommandRunnerOutputCap(t *testing.T) {
	r := newCommandRunner(false)
	_, err := r.run(context.Background(), nil, "/bin/sh", "-c", "head -c 17000000 /dev/zero")
	if err == nil || !strings.Contains(err.Error(), "printed more than") {
		t.Errorf("error = %v, want the output cap to be reported", err)
	}
}

// A descendant that leaves the process group (setsid) survives the group
// kill and keeps stdout open; WaitDelay still bounds the run.
func TestCommandRunnerEscapedDescendant(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	r := newCommandRunner(false)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.run(ctx, nil, "/bin/sh", "-c", `setsid sh -c 'echo $$ >"$0"; exec sleep 3600' "$1" & wait`, "sh", pidFile)
	elapsed := time.Since(start)
	pid := readPID(t, pidFile)
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })

	if !errors.Is(err, errCommandTimeout) {
		t.Fatalf("error = %v, want a timeout", err)
	}
	if limit := 500*time.Millisecond + commandWaitDelay + abandonAfter + 3*time.Second; elapsed > limit {
		t.Errorf("run took %s with an escaped descendant, want under %s", elapsed, limit)
	}
}

// Commands are told apart by path: one hung command does not block another.
func TestCommandRunnerPerCommand(t *testing.T) {
	r := newCommandRunner(false)
	hang := fixturePath(t, "gpfs", "mmpmon-hang")
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Setenv("FAKE_GPFS_PIDFILE", pidFile)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.run(ctx, nil, hang)
		done <- err
	}()
	pgid := readPID(t, pidFile)
	t.Cleanup(func() { killGroup(pgid) })

	out, err := r.run(context.Background(), nil, "/bin/echo", "ok")
	if err != nil || string(out) != "ok\n" {
		t.Errorf("another command while one hangs: %q, %v", out, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, errCommandTimeout) {
		t.Errorf("cancelled run error = %v, want a timeout", err)
	}
	probetest.WaitUntil(t, "the hung command's group to disappear", 10*time.Second, func() bool {
		return processGroupGone(pgid)
	})
}

// A second run of a command whose earlier run has not exited fails at once
// instead of starting another copy; once the first is gone, the command
// may run again.
func TestCommandRunnerStartsNoSecondCopy(t *testing.T) {
	r := newCommandRunner(false)
	hang := fixturePath(t, "gpfs", "mmpmon-hang")
	countFile := filepath.Join(t.TempDir(), "starts")
	t.Setenv("FAKE_GPFS_COUNTFILE", countFile)
	t.Cleanup(func() {
		for _, pgid := range readPIDs(t, countFile) {
			killGroup(pgid)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.run(ctx, nil, hang)
		done <- err
	}()
	probetest.WaitUntil(t, "the hung command to start", 10*time.Second, func() bool { return countLines(t, countFile) == 1 })

	if _, err := r.run(context.Background(), nil, hang); !errors.Is(err, errStillRunning) {
		t.Errorf("second run while the first hangs: %v, want errStillRunning", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the first run returned (%v) before it was cancelled", err)
	default:
	}
	if n := countLines(t, countFile); n != 1 {
		t.Errorf("the command was started %d times while the first run hung, want 1", n)
	}

	cancel()
	if err := <-done; !errors.Is(err, errCommandTimeout) {
		t.Errorf("cancelled run error = %v, want a timeout", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if _, err := r.run(ctx2, nil, hang); !errors.Is(err, errCommandTimeout) {
		t.Errorf("run after the first was killed: %v, want it started and timed out", err)
	}
	if n := countLines(t, countFile); n != 2 {
		t.Errorf("the command was started %d times in all, want 2", n)
	}
}

func TestCappedBuffer(t *testing.T) {
	for _, useReadFrom := range []bool{false, true} {
		b := &cappedBuffer{max: 10}
		in := strings.Repeat("x", 25)
		if useReadFrom {
			n, err := b.ReadFrom(strings.NewReader(in))
			if err != nil || n != 25 {
				t.Errorf("ReadFrom = %d, %v; want all 25 bytes consumed", n, err)
			}
		} else {
			for i := 0; i < 5; i++ {
				if n, err := b.Write([]byte(in[i*5 : i*5+5])); err != nil || n != 5 {
					t.Errorf("Write = %d, %v", n, err)
				}
			}
		}
		if b.String() != strings.Repeat("x", 10) || !b.overflow {
			t.Errorf("readFrom=%v: kept %q, overflow %v; want 10 bytes and overflow", useReadFrom, b.String(), b.overflow)
		}
	}
	b := &cappedBuffer{max: 10}
	if _, err := b.ReadFrom(strings.NewReader("short")); err != nil || b.String() != "short" || b.overflow {
		t.Errorf("short input: %q overflow %v err %v", b.String(), b.overflow, err)
	}
}
