//go:build integration

package faultfs

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The FS is served by this test process, so the syscalls that must meet
// a fault (and hang, or be SIGKILLed) are made by a child: the test
// binary re-executed with childEnv set, which runs request lines from
// stdin one at a time and answers each on stdout.
const childEnv = "FAULTFS_TEST_CHILD"

// replyTimeout bounds every wait for a child that is not meant to hang.
// It is generous because a loaded 2-core CI machine can be slow.
const replyTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// request is one operation for the child. Paths are absolute; ID names a
// descriptor the child keeps open between requests.
type request struct {
	Op    string   `json:"op"`
	Path  string   `json:"path,omitempty"`
	To    string   `json:"to,omitempty"`
	ID    string   `json:"id,omitempty"`
	Flags []string `json:"flags,omitempty"`
	Data  string   `json:"data,omitempty"`
}

// reply reports the errno name ("" on success) the child's syscall got,
// as unix.ErrnoName spells it, and how long the syscall took.
type reply struct {
	Errno string   `json:"errno"`
	Data  string   `json:"data,omitempty"`
	Names []string `json:"names,omitempty"`
	Nanos int64    `json:"nanos"`
}

func runChild(in io.Reader, out io.Writer) int {
	fds := map[string]int{}
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintf(os.Stderr, "child: bad request %q: %v\n", sc.Text(), err)
			return 2
		}
		start := time.Now()
		rep, err := childDo(req, fds)
		rep.Nanos = time.Since(start).Nanoseconds()
		if err != nil {
			var errno syscall.Errno
			if !errors.As(err, &errno) {
				fmt.Fprintf(os.Stderr, "child: %s: %v\n", req.Op, err)
				return 2
			}
			rep.Errno = unix.ErrnoName(errno)
		}
		if err := enc.Encode(rep); err != nil {
			return 2
		}
	}
	return 0
}

// retry repeats a syscall that a signal interrupted, as Go's os package
// does, so only the fault under test decides the outcome.
func retry(fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func childDo(req request, fds map[string]int) (reply, error) {
	var rep reply
	switch req.Op {
	case "open":
		bits := map[string]int{"r": syscall.O_RDONLY, "w": syscall.O_WRONLY, "rw": syscall.O_RDWR,
			"creat": syscall.O_CREAT, "excl": syscall.O_EXCL, "trunc": syscall.O_TRUNC}
		flags := syscall.O_CLOEXEC
		for _, f := range req.Flags {
			bit, ok := bits[f]
			if !ok {
				return rep, fmt.Errorf("unknown open flag %q", f)
			}
			flags |= bit
		}
		return rep, retry(func() error {
			fd, err := syscall.Open(req.Path, flags, 0o644)
			if err == nil {
				fds[req.ID] = fd
			}
			return err
		})
	case "write":
		return rep, retry(func() error {
			_, err := syscall.Write(fds[req.ID], []byte(req.Data))
			return err
		})
	case "read":
		buf := make([]byte, 64*1024)
		return rep, retry(func() error {
			n, err := syscall.Pread(fds[req.ID], buf, 0)
			if err == nil {
				rep.Data = string(buf[:n])
			}
			return err
		})
	case "fsync":
		return rep, retry(func() error { return syscall.Fsync(fds[req.ID]) })
	case "close":
		fd := fds[req.ID]
		delete(fds, req.ID)
		// close(2) must not be retried: the descriptor is gone even
		// when the flush failed.
		return rep, syscall.Close(fd)
	case "create":
		var fd int
		if err := retry(func() (err error) {
			fd, err = syscall.Open(req.Path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o644)
			return err
		}); err != nil {
			return rep, err
		}
		// The file exists once open succeeded. An EINTR from the flush
		// of its close says a signal came meanwhile, not that the
		// create failed; retrying it would meet the file with O_EXCL.
		if err := syscall.Close(fd); err != nil && !errors.Is(err, syscall.EINTR) {
			return rep, err
		}
		return rep, nil
	case "stat":
		var st syscall.Stat_t
		return rep, retry(func() error { return syscall.Stat(req.Path, &st) })
	case "chmod":
		return rep, retry(func() error { return syscall.Chmod(req.Path, 0o600) })
	case "mkdir":
		return rep, retry(func() error { return syscall.Mkdir(req.Path, 0o755) })
	case "rmdir":
		return rep, retry(func() error { return syscall.Rmdir(req.Path) })
	case "unlink":
		return rep, retry(func() error { return syscall.Unlink(req.Path) })
	case "rename":
		return rep, retry(func() error { return syscall.Rename(req.Path, req.To) })
	case "statfs":
		var st syscall.Statfs_t
		return rep, retry(func() error { return syscall.Statfs(req.Path, &st) })
	case "readdir":
		return rep, retry(func() error {
			ents, err := os.ReadDir(req.Path)
			rep.Names = nil
			for _, e := range ents {
				rep.Names = append(rep.Names, e.Name())
			}
			return err
		})
	}
	return rep, fmt.Errorf("unknown op %q", req.Op)
}

// child is a running helper process.
type child struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan reply
	exited  chan struct{}
	waitErr error
}

// startChild starts a helper and registers its cleanup; call it after
// MountForTest so the child is killed before the mount is torn down.
func startChild(t *testing.T) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	// The child must not outlive a crashed test, or it could keep the
	// mount busy.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting helper child: %v", err)
	}
	c := &child{t: t, cmd: cmd, stdin: stdin, replies: make(chan reply, 16), exited: make(chan struct{})}
	go func() {
		dec := json.NewDecoder(stdout)
		for {
			var r reply
			if err := dec.Decode(&r); err != nil {
				break
			}
			c.replies <- r
		}
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(replyTimeout):
			t.Errorf("helper child %d did not exit %s after SIGKILL", cmd.Process.Pid, replyTimeout)
		}
	})
	return c
}

// send issues req without waiting for the reply.
func (c *child) send(req request) {
	c.t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("sending %s to helper child: %v", req.Op, err)
	}
}

// next waits for the reply to the oldest unanswered request.
func (c *child) next(what string) reply {
	c.t.Helper()
	select {
	case r := <-c.replies:
		return r
	case <-c.exited:
		c.t.Fatalf("%s: helper child exited (%v) without replying", what, c.waitErr)
	case <-time.After(replyTimeout):
		c.t.Fatalf("%s: no reply from helper child within %s", what, replyTimeout)
	}
	return reply{}
}

// do runs req and returns its reply.
func (c *child) do(req request) reply {
	c.t.Helper()
	c.send(req)
	return c.next(req.Op + " " + req.Path)
}

// expect runs req and fails the test unless the syscall got wantErrno
// ("" for success).
func (c *child) expect(req request, wantErrno string) reply {
	c.t.Helper()
	r := c.do(req)
	if r.Errno != wantErrno {
		want := wantErrno
		if want == "" {
			want = "success"
		}
		got := r.Errno
		if got == "" {
			got = "success"
		}
		c.t.Errorf("%s %s %s %s: got %s, want %s", req.Op, req.ID, req.Path, strings.Join(req.Flags, ","), got, want)
	}
	return r
}

// kill SIGKILLs the child and waits for it to exit.
func (c *child) kill(ctx context.Context) error {
	if err := c.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("killing helper child: %w", err)
	}
	select {
	case <-c.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("helper child %d still alive after SIGKILL: %w", c.cmd.Process.Pid, ctx.Err())
	}
}
