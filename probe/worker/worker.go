// Package worker owns both ends of the pipe to a probe-worker child
// process: the runner that starts it in its own process group with a
// deadline, kills the group and reports a worker that will not die, and
// the worker's main, which reads one probe.Request and writes one
// probe.Result as JSON. A hung mount therefore holds a child, never the
// daemon.
package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/engine"
)

// Runner runs one probe request and reports how it ended.
type Runner interface {
	Run(ctx context.Context, req probe.Request) Outcome
}

// Outcome is a run's result plus what happened to the process that ran it.
type Outcome struct {
	Result *probe.Result
	// TimedOut is set when the run was killed at its timeout.
	TimedOut bool
	// Stuck, when not nil, is closed once a worker that ignored SIGKILL
	// (uninterruptible sleep on a dead mount) finally exits.
	Stuck <-chan struct{}
}

// ProcessRunner runs each request in a child process (`plateau_exporter
// probe-worker`), so that a hung mount holds the child, never the daemon.
// The child gets its own process group, so a timeout kills everything it
// started, and a parent-death signal, so it never outlives the daemon.
type ProcessRunner struct {
	// Command is the worker's argv; the request goes to its stdin as JSON
	// and the result comes back on stdout.
	Command []string
	// Env is added to the daemon's environment for the worker.
	Env    []string
	Logger log.Logger
	// KillGrace is how long to wait for exit after SIGKILL before the
	// worker is counted as abandoned.
	KillGrace time.Duration
}

// maxResultBytes bounds what a worker may print; a result is a few KiB.
const maxResultBytes = 8 << 20

// DefaultCommand re-executes this binary; /proc/self/exe still works
// after a package upgrade replaced the file on disk.
func DefaultCommand() []string { return []string{"/proc/self/exe", "probe-worker"} }

// Run implements Runner.
func (w *ProcessRunner) Run(ctx context.Context, req probe.Request) Outcome {
	start := time.Now()
	failed := func(err error) Outcome {
		r := &probe.Result{Target: req.Target, Probe: req.Probe.Name, Kind: req.Probe.Kind, Start: start, End: time.Now()}
		r.Fail(err)
		return Outcome{Result: r}
	}
	payload, err := json.Marshal(req)
	if err != nil {
		return failed(fmt.Errorf("encode request: %w", err))
	}
	cmd := exec.Command(w.Command[0], w.Command[1:]...)
	cmd.Stdin = bytes.NewReader(payload)
	// No asynchronous preemption in the worker: the Go runtime preempts
	// with SIGURG, and a signal that lands while a syscall waits on a slow
	// FUSE or interruptible NFS mount makes that syscall fail with EINTR,
	// which the probe's raw unix calls would report as a failed run
	// (reason other). Seen on faultfs with 5ms per request: 3 runs in 16
	// failed in open, mkdir or statfs with "interrupted system call". The
	// worker's goroutines block in syscalls, where the runtime does not
	// need signals to preempt them. A later GODEBUG setting wins.
	cmd.Env = append(append(os.Environ(), "GODEBUG=asyncpreemptoff=1"), w.Env...)
	var stdout limitedBuffer
	stdout.limit = maxResultBytes
	var stderr limitedBuffer
	stderr.limit = 64 << 10
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	// AmbientCaps stays empty: the worker starts with empty ambient and
	// inheritable sets, because a daemon running as its own user has
	// dropped every capability before it schedules a probe
	// (cmd/plateau_exporter/smarthelper.go), and none is raised here.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, AmbientCaps: nil}
	// Output pipes are closed this long after the worker exits even if a
	// grandchild still holds them, so Wait cannot hang on them.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return failed(fmt.Errorf("start worker: %w", err))
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()

	timer := time.NewTimer(req.Probe.Timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		return w.kill(cmd, done, req, start, fmt.Errorf("probe %s/%s: %w after %s", req.Target, req.Probe.Name, context.DeadlineExceeded, req.Probe.Timeout))
	case <-ctx.Done():
		return w.kill(cmd, done, req, start, fmt.Errorf("probe %s/%s: stopped: %w", req.Target, req.Probe.Name, ctx.Err()))
	}

	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		level.Debug(w.Logger).Log("msg", "worker stderr", "target", req.Target, "probe", req.Probe.Name, "stderr", msg)
	}
	var res probe.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Probe == "" {
		return failed(fmt.Errorf("worker for %s/%s ended without a result (%v): %s", req.Target, req.Probe.Name, waitErr, lastLine(stderr.String())))
	}
	return Outcome{Result: &res}
}

// kill ends the worker's process group. A worker stuck in uninterruptible
// sleep survives SIGKILL; it is then reported Stuck, and the caller keeps
// the target closed until it exits.
func (w *ProcessRunner) kill(cmd *exec.Cmd, done chan struct{}, req probe.Request, start time.Time, cause error) Outcome {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	r := &probe.Result{Target: req.Target, Probe: req.Probe.Name, Kind: req.Probe.Kind, Start: start}
	r.Fail(cause)
	grace := w.KillGrace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	select {
	case <-done:
		r.End = time.Now()
		return Outcome{Result: r, TimedOut: true}
	case <-time.After(grace):
		level.Error(w.Logger).Log("msg", "worker did not exit after SIGKILL; abandoning it until it does", "target", req.Target, "probe", req.Probe.Name, "pid", cmd.Process.Pid)
		r.End = time.Now()
		return Outcome{Result: r, TimedOut: true, Stuck: done}
	}
}

// InProcessRunner runs requests in the calling process; the `probe`
// command and tests use it. It cannot protect against a hung mount.
type InProcessRunner struct{}

// Run implements Runner.
func (InProcessRunner) Run(ctx context.Context, req probe.Request) Outcome {
	return Outcome{Result: engine.Execute(ctx, req)}
}

// Main is the body of the hidden `probe-worker` command: one request
// on stdin, one result on stdout. SIGTERM and SIGINT stop the run cleanly.
func Main(stdin io.Reader, stdout io.Writer) error {
	var req probe.Request
	dec := json.NewDecoder(io.LimitReader(stdin, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("probe-worker: read request: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := engine.Execute(ctx, req)
	return json.NewEncoder(stdout).Encode(res)
}

type limitedBuffer struct {
	bytes.Buffer
	limit int
}

var errOutputTooLarge = errors.New("worker output too large")

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		return 0, errOutputTooLarge
	}
	return b.Buffer.Write(p)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 500 {
		s = s[len(s)-500:]
	}
	return s
}
