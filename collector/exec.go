package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errCommandTimeout is returned when a command is killed at its deadline.
var errCommandTimeout = errors.New("timed out")

const (
	// maxCommandOutput bounds what one command may print; mmpmon output for
	// a few hundred file systems and NSDs is well under 1 MiB.
	maxCommandOutput = 16 << 20
	// maxCommandStderr is how much stderr is kept to explain a failure.
	maxCommandStderr = 4 << 10
	// commandWaitDelay bounds the wait for the command's pipes once its
	// group is killed, in case a descendant escaped the group (setsid) and
	// still holds stdout. Without it Wait would block on that descendant.
	commandWaitDelay = 500 * time.Millisecond
	// abandonAfter is how long a scrape waits for a killed command to be
	// reaped. A process stuck in uninterruptible sleep ignores SIGKILL;
	// the scrape returns and the command stays marked as running.
	abandonAfter = time.Second
)

// commandRunner runs the external commands of one collector. Each command
// runs in its own process group with a deadline; at the deadline the whole
// group is killed, because a signal to sudo alone is not passed on to a
// child that cannot catch it, and shell wrappers leave their children behind.
// The runner remembers which commands are still running so that a scrape
// never starts a second copy of a command that has not exited.
type commandRunner struct {
	sudo bool
	// commands are the commands started and not yet reaped, by path.
	commands stuckCalls[error]
}

func newCommandRunner(sudo bool) *commandRunner {
	return &commandRunner{sudo: sudo}
}

// commandError is a command that ran and exited non-zero.
type commandError struct {
	command string
	status  int
	stderr  string
}

func (e *commandError) Error() string {
	msg := fmt.Sprintf("%s exited with status %d", e.command, e.status)
	if e.stderr != "" {
		msg += ": " + e.stderr
	}
	return msg
}

// run executes path with args, feeding stdin, and returns its standard
// output. It returns errStillRunning (wrapped) when the same path started by
// an earlier call has not exited, errCommandTimeout when ctx expires first,
// and a *commandError on a non-zero exit status.
func (r *commandRunner) run(ctx context.Context, stdin []byte, path string, args ...string) ([]byte, error) {
	return r.runKeyed(ctx, path, stdin, path, args...)
}

// runKeyed is run with the guard against a second copy keyed by key
// instead of the path: two collectors running the same program for
// different things (mmdiag --waiters and mmdiag --iohist) each wait only
// for their own earlier run.
func (r *commandRunner) runKeyed(ctx context.Context, key string, stdin []byte, path string, args ...string) ([]byte, error) {
	argv := append([]string{path}, args...)
	if r.sudo {
		// -n: never prompt; a password prompt would hang until the deadline.
		argv = append([]string{"sudo", "-n", "--"}, argv...)
	}
	display := strings.Join(argv, " ")

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// AmbientCaps stays empty: the command starts with empty ambient and
	// inheritable sets, because a daemon running as its own user has
	// dropped every capability before any collector runs
	// (cmd/plateau_exporter/smarthelper.go), and none is raised here.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, AmbientCaps: nil}
	// The group is killed while its leader is still unreaped, so the
	// process group ID cannot have been reused by then.
	cmd.Cancel = func() error {
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	cmd.WaitDelay = commandWaitDelay
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	stdout := &cappedBuffer{max: maxCommandOutput}
	stderr := &cappedBuffer{max: maxCommandStderr}
	cmd.Stdout = stdout
	cmd.Stderr = stderr

	var pid int
	done, err := r.commands.start(key, func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("starting %s: %w", display, err)
		}
		pid = cmd.Process.Pid
		return pid, nil
	}, cmd.Wait)
	var prev *stillRunningError
	if errors.As(err, &prev) {
		return nil, fmt.Errorf("%s (pid %d, started %s ago): %w",
			display, prev.pid, time.Since(prev.started).Round(time.Millisecond), errStillRunning)
	}
	if err != nil {
		return nil, err
	}

	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case <-done:
		case <-time.After(abandonAfter):
			return nil, fmt.Errorf("%s (pid %d) %w and did not exit after SIGKILL to its process group; it will not be started again until it exits",
				display, pid, errCommandTimeout)
		}
		return nil, fmt.Errorf("%s (pid %d) %w; its process group was killed", display, pid, errCommandTimeout)
	}
	if ctx.Err() != nil {
		// The command may have exited on its own just as the deadline
		// passed; its output is then complete but it was also signalled
		// possibly mid-write, so it is not trusted.
		return nil, fmt.Errorf("%s (pid %d) %w; its process group was killed", display, pid, errCommandTimeout)
	}
	if stdout.overflow {
		return nil, fmt.Errorf("%s printed more than %d bytes", display, maxCommandOutput)
	}
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return stdout.Bytes(), &commandError{
				command: display,
				status:  exitErr.ExitCode(),
				stderr:  strings.TrimSpace(stderr.String()),
			}
		}
		return nil, fmt.Errorf("running %s: %w", display, err)
	}
	return stdout.Bytes(), nil
}

// cappedBuffer keeps at most max bytes and records that more were offered.
// It never fails a write, so the command is not killed by SIGPIPE before its
// exit status is known. The buffer is a named field, not embedded: an
// embedded bytes.Buffer would lend its ReadFrom to io.Copy, bypassing Write.
type cappedBuffer struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	room := b.max - b.buf.Len()
	if len(p) > room {
		b.overflow = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

// ReadFrom lets io.Copy, which os/exec runs for each output pipe, read
// straight into the buffer instead of through a 32 KiB copy buffer of its
// own for every pipe of every command of every scrape.
func (b *cappedBuffer) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	if room := int64(b.max - b.buf.Len()); room > 0 {
		m, err := b.buf.ReadFrom(io.LimitReader(r, room))
		n += m
		if err != nil {
			return n, err
		}
	}
	// Past the cap, output is counted and dropped so the command is not
	// blocked on a full pipe.
	var scratch [512]byte
	for {
		m, err := r.Read(scratch[:])
		if m > 0 {
			b.overflow = true
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (b *cappedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *cappedBuffer) String() string { return b.buf.String() }
