package collector

// The SMART keeper: starting helper processes with CAP_SYS_ADMIN (the
// keeper itself, from the daemon before it drops its capabilities, and each
// server, from the keeper), the wait for their ready message, and the
// keeper's loop that answers "start a server".

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/privsep"
)

// helperArgs are the arguments of a smart-helper process of role.
func helperArgs(role, devDir string, logArgs []string) []string {
	args := []string{"smart-helper", "--role=" + role, "--collector.nvme.dev-dir=" + devDir}
	return append(args, logArgs...)
}

// startHelperProcess starts this binary as a smart-helper of role with fd
// as its fd 3 and CAP_SYS_ADMIN raised in its ambient set, which is how a
// process without file capabilities keeps a capability across execve; the
// helper clears its ambient and inheritable sets first thing.
func startHelperProcess(role, devDir string, logArgs []string, fd int) (*exec.Cmd, error) {
	f := os.NewFile(uintptr(fd), "smart-helper socket")
	defer f.Close()
	cmd := exec.Command("/proc/self/exe", helperArgs(role, devDir, logArgs)...)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{AmbientCaps: []uintptr{privsep.CapSysAdmin}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting smart-helper --role=%s: %w", role, err)
	}
	return cmd, nil
}

// keeperStartTimeout bounds the wait for a new keeper or server to say it
// is ready.
const keeperStartTimeout = 15 * time.Second

// StartSMARTKeeper starts the SMART keeper while this process still holds
// CAP_SYS_ADMIN and waits until the keeper has dropped everything else. It
// returns the daemon's end of the control socket, not close-on-exec, for
// the daemon's next image to take over through
// --collector.nvme.smart-helper-fd. logArgs (--log.level=...) are passed on
// to the helpers.
func StartSMARTKeeper(logger log.Logger, logArgs []string) (int, error) {
	mine, theirs, err := seqpacketPair()
	if err != nil {
		return -1, err
	}
	cmd, err := startHelperProcess("keeper", *nvmeDevDir, logArgs, theirs)
	if err != nil {
		unix.Close(mine)
		return -1, err
	}
	fail := func(err error) (int, error) {
		unix.Close(mine)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return -1, err
	}
	// The keeper's first message says whether it kept CAP_SYS_ADMIN alone.
	if err := awaitReady(mine, "SMART keeper", cmd.Process.Pid); err != nil {
		return fail(err)
	}
	// The keeper is reaped by the next image, which inherits it as a
	// child (the pid does not change across execve); it is not waited for
	// here.
	if _, err := unix.FcntlInt(uintptr(mine), unix.F_SETFD, 0); err != nil {
		return fail(fmt.Errorf("keeping the SMART keeper's socket across exec: %w", err))
	}
	level.Info(logger).Log("msg", "SMART keeper started with CAP_SYS_ADMIN; the daemon drops every capability", "pid", cmd.Process.Pid)
	return mine, nil
}

// awaitReady waits, at most keeperStartTimeout, for the ready message of
// the helper process pid (what, for errors) on socket fd.
func awaitReady(fd int, what string, pid int) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(keeperStartTimeout)
	for {
		n, err := unix.Poll(fds, int(max(time.Until(deadline).Milliseconds(), 0)))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for the %s (pid %d): %w", what, pid, err)
		}
		if n == 0 {
			return fmt.Errorf("%s (pid %d) not ready within %s", what, pid, keeperStartTimeout)
		}
		break
	}
	buf := make([]byte, keeperMsgSize+smartMaxMessage+1)
	n, err := unix.Read(fd, buf)
	if err != nil || n == 0 {
		return fmt.Errorf("%s (pid %d) exited before it was ready: %v", what, pid, err)
	}
	m, err := parseKeeperMsg(buf[:n])
	if err != nil {
		return fmt.Errorf("%s (pid %d): %w", what, pid, err)
	}
	if m.op != keeperReady {
		return fmt.Errorf("%s (pid %d) failed: %s", what, pid, m.msg)
	}
	return nil
}

// runKeeper answers "start a server" requests until the daemon's end of
// conn closes.
func runKeeper(conn *net.UnixConn, devDir string, logger log.Logger, logArgs []string) error {
	if _, err := conn.Write(encodeKeeperMsg(keeperMsg{op: keeperReady, pid: uint32(os.Getpid())})); err != nil {
		return fmt.Errorf("SMART keeper: telling the daemon it is ready: %w", err)
	}
	buf := make([]byte, keeperMsgSize+smartMaxMessage+1)
	for {
		n, err := conn.Read(buf)
		if errors.Is(err, io.EOF) {
			return nil // the daemon is gone
		}
		if err != nil {
			return fmt.Errorf("SMART keeper: reading its control socket: %w", err)
		}
		m, err := parseKeeperMsg(buf[:n])
		if err == nil && m.op != keeperOpStart {
			err = fmt.Errorf("unknown keeper op %d", m.op)
		}
		if err != nil {
			if _, werr := conn.Write(encodeKeeperMsg(keeperMsg{op: keeperFailed, msg: err.Error()})); werr != nil {
				return fmt.Errorf("SMART keeper: replying: %w", werr)
			}
			continue
		}
		if err := startServer(conn, devDir, logger, logArgs); err != nil {
			level.Error(logger).Log("msg", "SMART keeper could not start a server", "err", err)
			if _, werr := conn.Write(encodeKeeperMsg(keeperMsg{op: keeperFailed, msg: err.Error()})); werr != nil {
				return fmt.Errorf("SMART keeper: replying: %w", werr)
			}
		}
	}
}

// startServer starts a server on a new socket pair and sends the daemon
// its end.
func startServer(conn *net.UnixConn, devDir string, logger log.Logger, logArgs []string) error {
	mine, theirs, err := seqpacketPair()
	if err != nil {
		return err
	}
	defer unix.Close(mine)
	cmd, err := startHelperProcess("server", devDir, logArgs, theirs)
	if err != nil {
		return err
	}
	pid := cmd.Process.Pid
	go func() {
		err := cmd.Wait()
		level.Info(logger).Log("msg", "SMART server exited", "pid", pid, "status", err)
	}()
	if err := awaitReady(mine, "SMART server", pid); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	msg := encodeKeeperMsg(keeperMsg{op: keeperStarted, pid: uint32(pid)})
	if _, _, err := conn.WriteMsgUnix(msg, unix.UnixRights(mine), nil); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("sending the SMART server's socket: %w", err)
	}
	return nil
}
