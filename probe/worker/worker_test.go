package worker

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

func testRunner(cmd ...string) *ProcessRunner {
	if len(cmd) == 0 {
		cmd = []string{os.Args[0]}
	}
	return &ProcessRunner{Command: cmd, Env: []string{workerEnv + "=1"}, Logger: log.NewNopLogger(), KillGrace: 10 * time.Second}
}

func TestWorkerRunsProbeInChildProcess(t *testing.T) {
	target := t.TempDir()
	out := testRunner().Run(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s")))
	if out.TimedOut || out.Stuck != nil || !out.Result.OK() {
		t.Fatalf("outcome %+v: %s", out, out.Result.Error)
	}
	if w := out.Result.Op("write"); w == nil || w.Bytes != 2<<20 {
		t.Fatalf("write result %+v", w)
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
		t.Errorf("worker left files: %v", left)
	}
}

// A worker that does not answer is killed with its whole process group at
// the timeout, grandchildren included.
func TestWorkerTimeoutKillsProcessGroup(t *testing.T) {
	pidFile := t.TempDir() + "/pids"
	r := testRunner("/bin/sh", "-c", "sleep 300 & echo $$ $! > "+pidFile+"; wait")
	p := probefixture.SmallSeq("s")
	p.Timeout = 1500 * time.Millisecond
	start := time.Now()
	out := r.Run(context.Background(), probefixture.Request(t.TempDir(), p))
	if !out.TimedOut || out.Result.Reason != probe.ReasonTimeout || out.Stuck != nil {
		t.Fatalf("want a timed-out, not stuck outcome, got %+v", out)
	}
	if took := time.Since(start); took < p.Timeout {
		t.Errorf("killed after %s, before its timeout %s", took, p.Timeout)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		waitGone(t, pid)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// A zombie (reaped later by init) no longer runs; treat it as gone.
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after the group kill", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWorkerWithoutResultFails(t *testing.T) {
	out := testRunner("/bin/sh", "-c", "echo not json; echo 'boom: disk on fire' >&2; exit 3").Run(context.Background(), probefixture.Request(t.TempDir(), probefixture.SmallSeq("s")))
	if out.Result.Reason != probe.ReasonOther || !strings.Contains(out.Result.Error, "boom: disk on fire") {
		t.Fatalf("want failure carrying stderr, got %q: %s", out.Result.Reason, out.Result.Error)
	}
}

func TestWorkerStoppedByContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	p := probefixture.SmallSeq("s")
	p.Timeout = time.Minute
	out := testRunner("/bin/sleep", "300").Run(ctx, probefixture.Request(t.TempDir(), p))
	if !out.TimedOut || !strings.Contains(out.Result.Error, "stopped") {
		t.Fatalf("want stop on cancel, got %+v", out.Result)
	}
}

func TestReasonOf(t *testing.T) {
	for errno, want := range map[syscall.Errno]string{
		syscall.ENOSPC: probe.ReasonENOSPC, syscall.EIO: probe.ReasonEIO, syscall.EACCES: probe.ReasonEACCES, syscall.EPERM: probe.ReasonEACCES,
		syscall.EROFS: probe.ReasonEROFS, syscall.ESTALE: probe.ReasonESTALE, syscall.EDQUOT: probe.ReasonEDQUOT, syscall.ENOENT: probe.ReasonENOENT, syscall.EBADF: probe.ReasonOther,
	} {
		err := &os.PathError{Op: "write", Path: "/x", Err: errno}
		if got := probe.ReasonOf(err); got != want {
			t.Errorf("ReasonOf(%v) = %q, want %q", errno, got, want)
		}
	}
	if probe.ReasonOf(context.DeadlineExceeded) != probe.ReasonTimeout {
		t.Error("deadline is not a timeout")
	}
}
