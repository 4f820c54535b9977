package collector

// The SMART helper's wire protocol: the request, reply and keeper control
// messages that daemon, keeper and server exchange, and their encoding and
// parsing. Nothing here reads a socket or starts a process.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
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
