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
	// StopGrace is how long a run stopped by its context (the daemon
	// stopping, Ctrl-C of probe) waits, after SIGTERM to the worker's
	// group, for the worker to remove its files; then SIGKILL. 0:
	// DefaultStopGrace. A run past its timeout is killed at once: it is
	// on a mount that does not answer, and its leftovers are swept by
	// the target's next run.
	StopGrace time.Duration
}

// maxResultBytes bounds what a worker may print; a result is a few KiB.
const maxResultBytes = 8 << 20

// maxStderrBytes is how much of a worker's stderr is kept (its end, where
// the reason for a failure is), and maxLoggedStderr how much of that one
// debug log line may carry.
const (
	maxStderrBytes  = 64 << 10
	maxLoggedStderr = 4 << 10
)

// DefaultStopGrace is how long a stopping daemon waits for a worker to
// remove its files after SIGTERM before it kills the worker's group. With
// KillGrace after SIGKILL and the HTTP server's shutdown, a stop stays
// inside the packaged unit's TimeoutStopSec=30s.
const DefaultStopGrace = 10 * time.Second

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
	// Both writers are plain io.Writers that keep reading past their cap:
	// exec copies into them with io.Copy, which would bypass a capped Write
	// through a promoted ReadFrom, and a writer that returned an error would
	// leave the worker blocked on a full pipe until its timeout.
	stdout := &headBuffer{limit: maxResultBytes}
	stderr := &tailBuffer{limit: maxStderrBytes}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
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
		// The worker's own SIGTERM path cancels the run, which removes
		// what it created; only a worker that does not finish in time is
		// killed.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		grace := w.StopGrace
		if grace <= 0 {
			grace = DefaultStopGrace
		}
		stopTimer := time.NewTimer(grace)
		defer stopTimer.Stop()
		select {
		case <-done:
			// The group may still hold a grandchild: end it too.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			r := &probe.Result{Target: req.Target, Probe: req.Probe.Name, Kind: req.Probe.Kind, Start: start, End: time.Now()}
			r.Fail(fmt.Errorf("probe %s/%s: stopped: %w", req.Target, req.Probe.Name, ctx.Err()))
			return Outcome{Result: r, TimedOut: true}
		case <-stopTimer.C:
			level.Warn(w.Logger).Log("msg", "worker did not stop within its grace after SIGTERM; killing it", "target", req.Target, "probe", req.Probe.Name, "grace", grace)
		}
		return w.kill(cmd, done, req, start, fmt.Errorf("probe %s/%s: stopped: %w", req.Target, req.Probe.Name, ctx.Err()))
	}

	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		level.Debug(w.Logger).Log("msg", "worker stderr", "target", req.Target, "probe", req.Probe.Name, "stderr", probe.BoundText(msg, maxLoggedStderr))
	}
	if stdout.dropped > 0 {
		return failed(fmt.Errorf("worker for %s/%s: %w: more than %d bytes on stdout (%d dropped)", req.Target, req.Probe.Name, errOutputTooLarge, maxResultBytes, stdout.dropped))
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

// headBuffer keeps the first limit bytes written to it and counts the
// rest. It is not a bytes.Buffer: that one's ReadFrom, which io.Copy
// prefers, would read without bound.
type headBuffer struct {
	buf     []byte
	limit   int
	dropped int64
}

var errOutputTooLarge = errors.New("worker output too large")

func (b *headBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.limit - len(b.buf); room < len(p) {
		if room < 0 {
			room = 0
		}
		b.dropped += int64(len(p) - room)
		p = p[:room]
	}
	if need := len(b.buf) + len(p); need > cap(b.buf) {
		// Doubling, not append's 1.25 growth of large slices, which
		// allocates five times the final size on the way to it.
		grown := make([]byte, len(b.buf), min(max(2*cap(b.buf), need, 4096), b.limit))
		copy(grown, b.buf)
		b.buf = grown
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

func (b *headBuffer) Bytes() []byte { return b.buf }

// tailBuffer keeps the last limit bytes written to it: a failing worker's
// reason is at the end of its stderr.
type tailBuffer struct {
	buf     []byte
	limit   int
	dropped int64
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= b.limit {
		b.dropped += int64(len(b.buf) + len(p) - b.limit)
		b.buf = append(b.buf[:0], p[len(p)-b.limit:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.limit; over > 0 {
		b.dropped += int64(over)
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

func (b *tailBuffer) String() string { return string(b.buf) }

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
