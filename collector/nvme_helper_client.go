package collector

// The daemon's end of the SMART helper: it asks the keeper for a server,
// supervises it (restarting it with backoff when it dies), and sends it
// read requests, each waited for with a deadline.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/sys/unix"
)

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
