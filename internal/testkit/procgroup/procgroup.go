// Package procgroup starts a test's child processes each in a process
// group of its own and stops the whole group at cleanup, so that nothing a
// server forked (Chromium's renderers, a daemon's helpers, Slurm's steps)
// outlives the test that started it, even when the test fails. Only tests
// import it.
package procgroup

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Options say how Start runs and stops a process.
type Options struct {
	// Name names the process in messages; the command's path when empty.
	Name string
	// Log, when set, receives the process's stdout and stderr; a failed
	// test gets its last TailLines lines at cleanup.
	Log string
	// TailLines is how much of Log a failed test gets (default 40).
	TailLines int
	// Grace is how long cleanup waits after SIGTERM to the group before
	// SIGKILL (default 10s).
	Grace time.Duration
	// SlowStopFails fails the test when the process outlives Grace: for
	// servers that must stop on SIGTERM.
	SlowStopFails bool
}

// Proc is a process Start started.
type Proc struct {
	Cmd  *exec.Cmd
	Name string
	Log  string
	done chan struct{}
}

// Start starts cmd in a new process group, its output to o.Log when set,
// and at cleanup sends the group SIGTERM, then SIGKILL after o.Grace, and
// SIGKILL again for whatever of the group outlived its leader.
func Start(t testing.TB, cmd *exec.Cmd, o Options) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Name: o.Name, Log: o.Log, done: make(chan struct{})}
	if p.Name == "" {
		p.Name = cmd.Path
	}
	var logFile *os.File
	if o.Log != "" {
		f, err := os.Create(o.Log)
		if err != nil {
			t.Fatal(err)
		}
		logFile = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		t.Fatalf("starting %s (%s): %v", p.Name, strings.Join(cmd.Args, " "), err)
	}
	go func() {
		_ = cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(p.done)
	}()
	grace := o.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	tail := o.TailLines
	if tail <= 0 {
		tail = 40
	}
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			if o.SlowStopFails {
				t.Errorf("%s did not stop on SIGTERM within %s; killing its process group", p.Name, grace)
			}
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.done
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if t.Failed() && o.Log != "" {
			t.Logf("last lines of the %s log (%s):\n%s", p.Name, o.Log, TailFile(o.Log, tail))
		}
	})
	return p
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited says whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Command is exec.CommandContext for a one-shot command in a process group
// of its own: when ctx ends, or at the test's cleanup, the whole group is
// killed, so a timeout also ends what the command started.
func Command(t testing.TB, ctx context.Context, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		if cmd.Process == nil {
			return
		}
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Logf("killing the process group %d of %s: %v", cmd.Process.Pid, name, err)
		}
	})
	return cmd
}

// TailFile is the last n lines of the file at path, or the error reading
// it.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return LastLines(string(data), n)
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
