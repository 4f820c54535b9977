package collector

// The SMART server: the helper that answers SMART read requests, opening
// a controller beneath the device directory and issuing the one Get Log
// Page command (smartLogIoctl, which the daemon also uses when it holds
// CAP_SYS_ADMIN and reads the logs itself).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/sys/unix"
)

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
