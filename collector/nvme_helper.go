package collector

// Privilege separation for the NVMe SMART reads (issue 17).
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

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/privsep"
)

// Wire format, version 1. All integers are little endian.
//
// Request, 32 bytes:
//
//	0:4   magic "PSRQ"
//	4     version (1)
//	5     op (1: read the SMART / Health log)
//	6:8   reserved, 0
//	8:12  request id, chosen by the daemon
//	12:16 timeout in milliseconds, 1 to 60000, given to the kernel
//	16    length of the controller name, 1 to 15
//	17:32 controller name, zero padded
//
// Reply, a 24-byte header and up to 512 bytes of payload:
//
//	0:4   magic "PSRS"
//	4     version (1)
//	5     status (smartStatus)
//	6:8   reserved, 0
//	8:12  the request's id (0 if the request was too short to hold one)
//	12:16 errno of a failed open or ioctl, else 0
//	16:18 payload length: 512 (the log) when status is OK, else a message
//	18:24 reserved, 0
//
// Keeper control message, both ways, 16 bytes and an optional message:
//
//	0:4   magic "PSKP"
//	4     version (1)
//	5     op (daemon to keeper: 1 start a server) or status (keeper to
//	      daemon: keeperReady, keeperStarted with the daemon's end of the
//	      server's socket attached, keeperFailed)
//	6:8   reserved, 0
//	8:12  pid of the keeper (ready) or of the server (started)
//	12:14 message length, at most 256
//	14:16 reserved, 0
//
// A server's first message on its own socket is also keeperReady (or
// keeperFailed): the keeper reads it before it passes that socket on.
const (
	smartHelperVersion    = 1
	smartRequestSize      = 32
	smartReplyHeaderSize  = 24
	smartMaxMessage       = 256
	smartMaxReplySize     = smartReplyHeaderSize + smartLogSize
	smartOpReadLog        = 1
	smartMaxNameLen       = 15
	smartMaxTimeoutMillis = 60000
	keeperMsgSize         = 16
	keeperOpStart         = 1
	// smartHelperMaxInflight bounds the reads one server runs at once; a
	// node has a few dozen controllers at most.
	smartHelperMaxInflight = 64
)

var (
	smartRequestMagic = [4]byte{'P', 'S', 'R', 'Q'}
	smartReplyMagic   = [4]byte{'P', 'S', 'R', 'S'}
	keeperMagic       = [4]byte{'P', 'S', 'K', 'P'}
	// nvmeControllerName is what a controller character device is called:
	// /dev/nvme0, never a namespace (nvme0n1) or a path.
	nvmeControllerName = regexp.MustCompile(`^nvme[0-9]{1,5}$`)
)

// smartStatus is a reply's outcome.
type smartStatus uint8

const (
	smartOK smartStatus = iota
	smartMalformed
	smartBadName
	smartOpenFailed
	smartCommandFailed
	smartBusy
)

func (s smartStatus) String() string {
	switch s {
	case smartOK:
		return "ok"
	case smartMalformed:
		return "malformed request"
	case smartBadName:
		return "invalid controller name"
	case smartOpenFailed:
		return "controller not opened"
	case smartCommandFailed:
		return "Get Log Page failed"
	case smartBusy:
		return "helper busy"
	}
	return "status " + strconv.Itoa(int(s))
}

const (
	keeperReady   = 1
	keeperStarted = 2
	keeperFailed  = 3
)

// smartRequest asks the server for one controller's SMART log.
type smartRequest struct {
	id      uint32
	timeout time.Duration
	name    string
}

// validControllerName reports whether name is an NVMe controller's device
// name, nvme followed by up to five digits.
func validControllerName(name string) bool {
	return len(name) <= smartMaxNameLen && nvmeControllerName.MatchString(name)
}

func encodeSMARTRequest(r smartRequest) ([]byte, error) {
	if !validControllerName(r.name) {
		return nil, fmt.Errorf("invalid NVMe controller name %q", r.name)
	}
	ms := r.timeout.Milliseconds()
	if ms < 1 || ms > smartMaxTimeoutMillis {
		return nil, fmt.Errorf("SMART read timeout %s outside 1ms to %dms", r.timeout, smartMaxTimeoutMillis)
	}
	b := make([]byte, smartRequestSize)
	copy(b, smartRequestMagic[:])
	b[4] = smartHelperVersion
	b[5] = smartOpReadLog
	binary.LittleEndian.PutUint32(b[8:], r.id)
	binary.LittleEndian.PutUint32(b[12:], uint32(ms))
	b[16] = byte(len(r.name))
	copy(b[17:], r.name)
	return b, nil
}

// parseSMARTRequest decodes one request message. Anything but an exact
// version-1 request is an error: wrong length, magic, version or op,
// reserved or padding bytes that are not zero, a timeout out of range, a
// name that is not a controller's.
func parseSMARTRequest(b []byte) (smartRequest, smartStatus, error) {
	var r smartRequest
	if len(b) != smartRequestSize {
		return r, smartMalformed, fmt.Errorf("request is %d bytes, want %d", len(b), smartRequestSize)
	}
	r.id = binary.LittleEndian.Uint32(b[8:])
	if [4]byte(b[0:4]) != smartRequestMagic {
		return r, smartMalformed, fmt.Errorf("request magic %q, want %q", b[0:4], smartRequestMagic[:])
	}
	if b[4] != smartHelperVersion {
		return r, smartMalformed, fmt.Errorf("request version %d, want %d", b[4], smartHelperVersion)
	}
	if b[5] != smartOpReadLog {
		return r, smartMalformed, fmt.Errorf("request op %d, want %d (read SMART log)", b[5], smartOpReadLog)
	}
	if b[6] != 0 || b[7] != 0 {
		return r, smartMalformed, errors.New("request reserved bytes are not zero")
	}
	ms := binary.LittleEndian.Uint32(b[12:])
	if ms < 1 || ms > smartMaxTimeoutMillis {
		return r, smartMalformed, fmt.Errorf("request timeout %dms outside 1 to %d", ms, smartMaxTimeoutMillis)
	}
	r.timeout = time.Duration(ms) * time.Millisecond
	n := int(b[16])
	if n < 1 || n > smartMaxNameLen {
		return r, smartMalformed, fmt.Errorf("request name length %d outside 1 to %d", n, smartMaxNameLen)
	}
	for _, c := range b[17+n:] {
		if c != 0 {
			return r, smartMalformed, errors.New("request name padding is not zero")
		}
	}
	name := string(b[17 : 17+n])
	if !validControllerName(name) {
		return r, smartBadName, fmt.Errorf("%q is not an NVMe controller name (nvme[0-9]{1,5})", name)
	}
	r.name = name
	return r, smartOK, nil
}

// smartReply is the server's answer to one request.
type smartReply struct {
	id      uint32
	status  smartStatus
	errno   unix.Errno
	payload []byte // the log when status is smartOK, else a message
}

func encodeSMARTReply(r smartReply) []byte {
	p := r.payload
	if r.status != smartOK && len(p) > smartMaxMessage {
		p = p[:smartMaxMessage]
	}
	b := make([]byte, smartReplyHeaderSize+len(p))
	copy(b, smartReplyMagic[:])
	b[4] = smartHelperVersion
	b[5] = byte(r.status)
	binary.LittleEndian.PutUint32(b[8:], r.id)
	binary.LittleEndian.PutUint32(b[12:], uint32(r.errno))
	binary.LittleEndian.PutUint16(b[16:], uint16(len(p)))
	copy(b[smartReplyHeaderSize:], p)
	return b
}

func parseSMARTReply(b []byte) (smartReply, error) {
	var r smartReply
	if len(b) < smartReplyHeaderSize || len(b) > smartMaxReplySize {
		return r, fmt.Errorf("reply is %d bytes, want %d to %d", len(b), smartReplyHeaderSize, smartMaxReplySize)
	}
	if [4]byte(b[0:4]) != smartReplyMagic || b[4] != smartHelperVersion {
		return r, fmt.Errorf("reply magic %q version %d, want %q version %d", b[0:4], b[4], smartReplyMagic[:], smartHelperVersion)
	}
	r.status = smartStatus(b[5])
	r.id = binary.LittleEndian.Uint32(b[8:])
	r.errno = unix.Errno(binary.LittleEndian.Uint32(b[12:]))
	n := int(binary.LittleEndian.Uint16(b[16:]))
	if n != len(b)-smartReplyHeaderSize {
		return r, fmt.Errorf("reply payload length %d, message has %d", n, len(b)-smartReplyHeaderSize)
	}
	if r.status == smartOK && n != smartLogSize {
		return r, fmt.Errorf("reply holds a %d-byte log, want %d", n, smartLogSize)
	}
	r.payload = b[smartReplyHeaderSize:]
	return r, nil
}

// err turns a failed reply into an error that keeps the errno, so that
// the collector's EPERM hint still applies.
func (r smartReply) err() error {
	if r.status == smartOK {
		return nil
	}
	msg := fmt.Sprintf("SMART helper: %s: %s", r.status, r.payload)
	if r.errno != 0 {
		return fmt.Errorf("%s: %w", msg, r.errno)
	}
	return errors.New(msg)
}

type keeperMsg struct {
	op  uint8 // op or status
	pid uint32
	msg string
}

func encodeKeeperMsg(m keeperMsg) []byte {
	if len(m.msg) > smartMaxMessage {
		m.msg = m.msg[:smartMaxMessage]
	}
	b := make([]byte, keeperMsgSize+len(m.msg))
	copy(b, keeperMagic[:])
	b[4] = smartHelperVersion
	b[5] = m.op
	binary.LittleEndian.PutUint32(b[8:], m.pid)
	binary.LittleEndian.PutUint16(b[12:], uint16(len(m.msg)))
	copy(b[keeperMsgSize:], m.msg)
	return b
}

func parseKeeperMsg(b []byte) (keeperMsg, error) {
	var m keeperMsg
	if len(b) < keeperMsgSize || len(b) > keeperMsgSize+smartMaxMessage {
		return m, fmt.Errorf("keeper message is %d bytes, want %d to %d", len(b), keeperMsgSize, keeperMsgSize+smartMaxMessage)
	}
	if [4]byte(b[0:4]) != keeperMagic || b[4] != smartHelperVersion || b[6] != 0 || b[7] != 0 || b[14] != 0 || b[15] != 0 {
		return m, fmt.Errorf("keeper message header %x is not version %d's", b[:keeperMsgSize], smartHelperVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[12:]))
	if n != len(b)-keeperMsgSize {
		return m, fmt.Errorf("keeper message length %d, message has %d", n, len(b)-keeperMsgSize)
	}
	m.op = b[5]
	m.pid = binary.LittleEndian.Uint32(b[8:])
	m.msg = string(b[keeperMsgSize:])
	return m, nil
}

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

// NVMeCollectorEnabled reports whether the flags enable the NVMe
// collector, so that the daemon starts a SMART helper only when it is used.
func NVMeCollectorEnabled() bool {
	on := collectorState[nvmeSubsystem]
	return on != nil && *on && (!*disableDefaultCollectors || forcedFlags[nvmeSubsystem])
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

// smartServer answers SMART read requests.
type smartServer struct {
	logger log.Logger
	read   func(name string, timeout time.Duration) ([]byte, smartStatus, error)
}

// serve answers requests on conn until its peer closes it. Each request
// is answered, a malformed one with an error reply; reads run
// concurrently, up to smartHelperMaxInflight.
func (s *smartServer) serve(conn *net.UnixConn) error {
	var (
		wmu      sync.Mutex
		wg       sync.WaitGroup
		writeErr error
	)
	defer wg.Wait()
	reply := func(r smartReply) {
		wmu.Lock()
		defer wmu.Unlock()
		if _, err := conn.Write(encodeSMARTReply(r)); err != nil && writeErr == nil {
			writeErr = err
		}
	}
	sem := make(chan struct{}, smartHelperMaxInflight)
	// One byte more than a request: a longer message is read truncated,
	// and still has the wrong length.
	buf := make([]byte, smartRequestSize+1)
	for {
		n, err := conn.Read(buf)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("SMART server: reading a request: %w", err)
		}
		req, status, err := parseSMARTRequest(buf[:n])
		if err != nil {
			level.Warn(s.logger).Log("msg", "SMART server: request refused", "err", err)
			reply(smartReply{id: req.id, status: status, payload: []byte(err.Error())})
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			reply(smartReply{id: req.id, status: smartBusy, payload: []byte(fmt.Sprintf("%d reads in flight", smartHelperMaxInflight))})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			log, status, err := s.read(req.name, req.timeout)
			r := smartReply{id: req.id, status: status, payload: log}
			if err != nil {
				r.payload = []byte(err.Error())
				var errno unix.Errno
				if errors.As(err, &errno) {
					r.errno = errno
				}
				if r.status == smartOK {
					r.status = smartCommandFailed
				}
			}
			reply(r)
		}()
	}
}

// readSMARTLogAt opens controller name beneath the directory dir (devDir,
// for messages) without following a symlink, refuses anything but a
// character device, and reads its SMART log.
func readSMARTLogAt(dir int, devDir, name string, timeout time.Duration) ([]byte, smartStatus, error) {
	if !validControllerName(name) {
		return nil, smartBadName, fmt.Errorf("%q is not an NVMe controller name", name)
	}
	path := devDir + "/" + name
	// O_NONBLOCK: opening a FIFO planted in the directory must not block.
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, smartOpenFailed, fmt.Errorf("opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, smartOpenFailed, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return nil, smartOpenFailed, fmt.Errorf("%s is not a character device (mode %#o): %w", path, st.Mode, unix.ENODEV)
	}
	b, err := smartLogIoctl(fd, path, timeout)
	if err != nil {
		return nil, smartCommandFailed, err
	}
	return b, smartOK, nil
}

// smartHelperClient is the daemon's end: it asks the keeper for a server,
// sends it requests, and asks for a new one, with backoff, when it dies.
type smartHelperClient struct {
	logger  log.Logger
	control *net.UnixConn

	mu   sync.Mutex
	conn *net.UnixConn // nil while no server runs
	pid  int
	// keeperPid is the keeper's pid, learnt from a server's socket.
	keeperPid int
	nextID    uint32
	pending   map[uint32]chan smartReply
	wmu       sync.Mutex // one request written at a time, with its deadline

	closed chan struct{}
	done   chan struct{}
}

// Restart backoff: doubling from smartRestartMin to smartRestartMax, back
// to the minimum after a server ran for smartRestartReset.
const (
	smartRestartMin   = 500 * time.Millisecond
	smartRestartMax   = 30 * time.Second
	smartRestartReset = time.Minute
	// smartReplyGrace is how much longer than the kernel's command
	// timeout the daemon waits for a reply.
	smartReplyGrace = 250 * time.Millisecond
)

// errSMARTHelperDown is a read while no server runs.
var errSMARTHelperDown = errors.New("SMART helper is not running (it is restarted with backoff)")

// errKeeperGone means no server can be started any more.
var errKeeperGone = errors.New("SMART keeper exited; SMART logs are unavailable until the service restarts")

// newSMARTHelperClient takes over the keeper's control socket at fd and
// starts the first server in the background.
func newSMARTHelperClient(fd int, logger log.Logger) (*smartHelperClient, error) {
	control, err := unixConnFromFD(fd, "SMART keeper control socket")
	if err != nil {
		return nil, err
	}
	c := &smartHelperClient{logger: logger, control: control, pending: map[uint32]chan smartReply{}, closed: make(chan struct{}), done: make(chan struct{})}
	go c.supervise()
	return c, nil
}

// Close stops the client; keeper and server exit when their sockets close.
func (c *smartHelperClient) Close() {
	close(c.closed)
	c.control.Close()
	c.mu.Lock()
	if c.conn != nil {
		c.conn.Close()
	}
	c.mu.Unlock()
	<-c.done
}

// running returns the pid of the server in use, 0 if none.
func (c *smartHelperClient) running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return 0
	}
	return c.pid
}

func (c *smartHelperClient) supervise() {
	defer close(c.done)
	backoff := smartRestartMin
	for {
		conn, pid, err := c.startServer()
		if err != nil {
			if errors.Is(err, errKeeperGone) {
				select {
				case <-c.closed:
				default:
					level.Error(c.logger).Log("msg", "SMART helper cannot be restarted; plateau_nvme_smart_available stays 0", "err", err)
				}
				c.reapKeeper()
				return
			}
			level.Warn(c.logger).Log("msg", "SMART helper did not start; retrying", "err", err, "retry_in", backoff)
		} else {
			started := time.Now()
			c.mu.Lock()
			c.conn, c.pid = conn, pid
			c.mu.Unlock()
			level.Info(c.logger).Log("msg", "SMART helper running", "pid", pid)
			err := c.readReplies(conn)
			c.mu.Lock()
			c.conn, c.pid = nil, 0
			for id, ch := range c.pending {
				ch <- smartReply{id: id, status: smartCommandFailed, payload: []byte("the helper exited before it replied")}
				delete(c.pending, id)
			}
			c.mu.Unlock()
			conn.Close()
			if time.Since(started) >= smartRestartReset {
				backoff = smartRestartMin
			}
			select {
			case <-c.closed:
				return
			default:
			}
			level.Warn(c.logger).Log("msg", "SMART helper exited; restarting it", "pid", pid, "err", err, "retry_in", backoff)
		}
		select {
		case <-c.closed:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, smartRestartMax)
	}
}

// startServer asks the keeper for a server and returns the daemon's end
// of its socket.
func (c *smartHelperClient) startServer() (*net.UnixConn, int, error) {
	// Longer than the keeper's own wait for a new server, so that the
	// keeper's answer, even a failure, comes before the deadline and is
	// not taken for the answer to the next request.
	deadline := time.Now().Add(keeperStartTimeout + 5*time.Second)
	_ = c.control.SetDeadline(deadline)
	if _, err := c.control.Write(encodeKeeperMsg(keeperMsg{op: keeperOpStart})); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", errKeeperGone, err)
	}
	buf := make([]byte, keeperMsgSize+smartMaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.control.ReadMsgUnix(buf, oob)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, 0, fmt.Errorf("SMART keeper did not answer within %s", keeperStartTimeout)
	}
	if err != nil || n == 0 {
		return nil, 0, fmt.Errorf("%w: %v", errKeeperGone, err)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, 0, fmt.Errorf("SMART keeper's reply: %w", err)
		}
		for _, m := range msgs {
			fs, err := unix.ParseUnixRights(&m)
			if err != nil {
				return nil, 0, fmt.Errorf("SMART keeper's reply: %w", err)
			}
			fds = append(fds, fs...)
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	m, err := parseKeeperMsg(buf[:n])
	if err != nil {
		closeAll()
		return nil, 0, fmt.Errorf("SMART keeper's reply: %w", err)
	}
	if m.op != keeperStarted {
		closeAll()
		return nil, 0, fmt.Errorf("SMART keeper: %s", m.msg)
	}
	if len(fds) != 1 {
		closeAll()
		return nil, 0, fmt.Errorf("SMART keeper's reply carries %d sockets, want 1", len(fds))
	}
	// The keeper created the pair, so it is the socket's peer: that is
	// how the daemon's new image, which inherited the keeper as a child
	// but not its pid, learns whom to reap.
	if cred, err := unix.GetsockoptUcred(fds[0], unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
		c.mu.Lock()
		c.keeperPid = int(cred.Pid)
		c.mu.Unlock()
	}
	conn, err := unixConnFromFD(fds[0], "SMART helper socket")
	if err != nil {
		return nil, 0, err
	}
	return conn, int(m.pid), nil
}

// reapKeeper collects the exit status of a keeper that exited, a child of
// this process since before its re-exec, so that it does not stay a zombie.
func (c *smartHelperClient) reapKeeper() {
	c.mu.Lock()
	pid := c.keeperPid
	c.mu.Unlock()
	if pid <= 0 || pid == os.Getpid() {
		return
	}
	// Its control socket is closed, so it is exiting: this wait is short.
	var ws unix.WaitStatus
	_, err := unix.Wait4(pid, &ws, 0, nil)
	for errors.Is(err, unix.EINTR) {
		_, err = unix.Wait4(pid, &ws, 0, nil)
	}
	if err == nil {
		level.Info(c.logger).Log("msg", "SMART keeper exited", "pid", pid, "status", ws.ExitStatus(), "signal", ws.Signal())
	}
}

// readReplies hands each reply on conn to its waiting request until conn
// fails, which is when the server has exited.
func (c *smartHelperClient) readReplies(conn *net.UnixConn) error {
	buf := make([]byte, smartMaxReplySize+1)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return err
		}
		r, err := parseSMARTReply(buf[:n])
		if err != nil {
			return fmt.Errorf("SMART helper sent a bad reply: %w", err)
		}
		r.payload = append([]byte(nil), r.payload...)
		c.mu.Lock()
		ch, ok := c.pending[r.id]
		delete(c.pending, r.id)
		c.mu.Unlock()
		if ok {
			ch <- r // buffered, one reply per request
		}
	}
}

// read asks the running server for controller name's SMART log and waits
// at most timeout plus a grace for the reply.
func (c *smartHelperClient) read(name string, timeout time.Duration) ([]byte, error) {
	c.mu.Lock()
	conn := c.conn
	if conn == nil {
		c.mu.Unlock()
		return nil, errSMARTHelperDown
	}
	c.nextID++
	id := c.nextID
	req, err := encodeSMARTRequest(smartRequest{id: id, timeout: timeout, name: name})
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	ch := make(chan smartReply, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}

	wait := time.NewTimer(timeout + smartReplyGrace)
	defer wait.Stop()
	c.wmu.Lock()
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err = conn.Write(req)
	c.wmu.Unlock()
	if err != nil {
		forget()
		return nil, fmt.Errorf("sending a SMART request to the helper: %w", err)
	}
	select {
	case r := <-ch:
		if err := r.err(); err != nil {
			return nil, err
		}
		return r.payload, nil
	case <-wait.C:
		forget()
		return nil, fmt.Errorf("SMART helper did not reply within %s", timeout+smartReplyGrace)
	}
}

// smartLogIoctl issues Get Log Page (SMART) on the open controller fd.
func smartLogIoctl(fd int, path string, timeout time.Duration) ([]byte, error) {
	// buf escapes to the heap (it is returned), so its address stays valid
	// while the kernel writes to it; Go's heap does not move objects.
	buf := make([]byte, smartLogSize)
	cmd := smartGetLogCmd(buf, timeout)
	status, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return nil, fmt.Errorf("NVMe Get Log Page (SMART) on %s: %w", path, errno)
	}
	if status != 0 {
		// A positive return is the NVMe completion status.
		return nil, fmt.Errorf("NVMe Get Log Page (SMART) on %s: controller status %#x", path, status)
	}
	return buf, nil
}
