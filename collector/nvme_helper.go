package collector

// Privilege separation for the NVMe SMART reads.
//
// The SMART / Health log is read with the NVMe admin passthrough ioctl,
// which needs CAP_SYS_ADMIN. The daemon does not keep that capability:
// when it starts with it (the packaged unit gives it to user plateau), it
// first starts the keeper, `plateau_exporter smart-helper --role=keeper`,
// handing it CAP_SYS_ADMIN through the ambient set, then re-executes itself
// with every capability set empty (cmd/plateau_exporter, internal/privsep).
//
// Two helper processes hold CAP_SYS_ADMIN, effective and permitted only,
// nothing inheritable or ambient:
//   - the keeper reads nothing but one fixed 16-byte message, "start a
//     server", on its control socket. It starts a server with a new socket
//     pair, waits until the server says it has dropped everything but
//     CAP_SYS_ADMIN, and passes the daemon's end back (SCM_RIGHTS). It exists because
//     a process without capabilities cannot create one that has them: it
//     is what lets the daemon restart a server that died, with backoff.
//   - the server, `smart-helper --role=server`, answers SMART read requests
//     on its socket: fixed 32-byte versioned requests naming a controller
//     that must match nvme[0-9]{1,5}, opened beneath --collector.nvme.dev-dir
//     without following symlinks and only if it is a character device, and
//     read with the one Get Log Page (SMART) command. A malformed request
//     gets an error reply. It issues no other command and opens no other
//     file.
//
// Both sockets are AF_UNIX SOCK_SEQPACKET: every message is read whole or
// not at all, so a server that dies mid-reply cannot leave half a frame for
// its successor. Replies carry the request's id; the daemon waits for each
// with a deadline and a request to a server that is down or restarting
// fails at once, so a scrape reports plateau_nvme_smart_available 0 and
// never blocks. Keeper and server exit when the daemon's end of their
// socket closes.
//
// This file holds what both helper roles share: the entry point of the
// smart-helper command, the capability drop each does first, and the
// sockets; and whether the daemon needs a helper at all. The rest is split by who runs it: nvme_helper_protocol.go (the
// messages), nvme_helper_keeper.go, nvme_helper_server.go and
// nvme_helper_client.go (the daemon's end).

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/go-kit/log"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/privsep"
)

// seqpacketPair returns a connected AF_UNIX SOCK_SEQPACKET pair, both
// close-on-exec.
func seqpacketPair() (a, b int, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("socketpair(AF_UNIX, SOCK_SEQPACKET): %w", err)
	}
	return fds[0], fds[1], nil
}

// unixConnFromFD wraps fd, a SOCK_SEQPACKET socket, for deadlines; fd
// itself is closed (net.FileConn keeps a close-on-exec duplicate).
func unixConnFromFD(fd int, name string) (*net.UnixConn, error) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s (fd %d) is not a socket: %w", name, fd, err)
	}
	if typ != unix.SOCK_SEQPACKET {
		unix.Close(fd)
		return nil, fmt.Errorf("%s (fd %d) is socket type %d, want SOCK_SEQPACKET", name, fd, typ)
	}
	f := os.NewFile(uintptr(fd), name)
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s is a %T, not a unix socket", name, c)
	}
	return uc, nil
}

// NVMeCollectorEnabled reports whether the flags enable the NVMe
// collector, so that the daemon starts a SMART helper only when it is used.
func NVMeCollectorEnabled() bool {
	on := collectorState[nvmeSubsystem]
	return on != nil && *on && (!*disableDefaultCollectors || forcedFlags[nvmeSubsystem])
}

// keepSysAdminOnly is what each helper does first: CAP_SYS_ADMIN effective
// and permitted, nothing else, nothing inheritable or ambient.
func keepSysAdminOnly() error {
	if err := privsep.KeepOnly(privsep.MaskSysAdmin); err != nil {
		return fmt.Errorf("keeping only CAP_SYS_ADMIN: %w", err)
	}
	s, err := privsep.Self()
	if err != nil {
		return err
	}
	if s.Effective != privsep.MaskSysAdmin {
		return fmt.Errorf("CAP_SYS_ADMIN is not held (%s); give the daemon CAP_SYS_ADMIN (AmbientCapabilities= in the unit) to read SMART logs", s)
	}
	return nil
}

// SMARTHelperMain runs a smart-helper process of role ("keeper" or
// "server") on fd 3, the socket its parent gave it.
func SMARTHelperMain(role string, logger log.Logger, logArgs []string) error {
	conn, err := unixConnFromFD(3, "smart-helper socket")
	if err != nil {
		return err
	}
	defer conn.Close()
	switch role {
	case "keeper":
		if err := keepSysAdminOnly(); err != nil {
			_, _ = conn.Write(encodeKeeperMsg(keeperMsg{op: keeperFailed, msg: err.Error()}))
			return err
		}
		return runKeeper(conn, *nvmeDevDir, logger, logArgs)
	case "server":
		// The keeper hands the daemon this server's socket only after the
		// ready message, so no request reaches a server that still holds
		// more than it should.
		if err := keepSysAdminOnly(); err != nil {
			_, _ = conn.Write(encodeKeeperMsg(keeperMsg{op: keeperFailed, msg: err.Error()}))
			return err
		}
		dir, err := unix.Open(*nvmeDevDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			err = fmt.Errorf("opening NVMe device directory %s: %w", *nvmeDevDir, err)
			_, _ = conn.Write(encodeKeeperMsg(keeperMsg{op: keeperFailed, msg: err.Error()}))
			return err
		}
		defer unix.Close(dir)
		if _, err := conn.Write(encodeKeeperMsg(keeperMsg{op: keeperReady, pid: uint32(os.Getpid())})); err != nil {
			return fmt.Errorf("SMART server: telling the keeper it is ready: %w", err)
		}
		srv := &smartServer{logger: logger, read: func(name string, timeout time.Duration) ([]byte, smartStatus, error) {
			return readSMARTLogAt(dir, *nvmeDevDir, name, timeout)
		}}
		return srv.serve(conn)
	}
	return fmt.Errorf("unknown smart-helper role %q", role)
}
