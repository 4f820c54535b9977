package collector

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The NFS collector reads /proc/self/mountstats with a parser of its own.
// procfs's parser builds every statistic of every mount, with a []uint64
// and a struct per operation line and strings.Fields on each line; for 40
// mounts that was 1.2 MB and more than a millisecond per scrape, most of
// it for numbers the collector never exports. This one keeps only what
// nfs.go exports and allocates little beyond the label strings.
//
// Where procfs accepts a file, this parser reads the same values from it
// (FuzzParseMountstats checks that). It is more lenient elsewhere: it
// skips device lines it does not understand instead of failing the whole
// file, and a malformed NFS block drops that mount only. The mount, not
// the line, is what a bad line costs: its counters are sums over its lines
// (retransmissions over the operations, transports over nconnect), and a
// sum missing one line would go backwards, a false counter reset.

// maxMountstatsSize bounds what a scrape reads. A node with thousands of
// automounted NFS file systems has a few megabytes of mountstats; a file
// this large means something is wrong, and reading on would keep the
// memory in the collector's scratch.
const maxMountstatsSize = 64 << 20

// nfsOpStats is one used NFS operation of a mount.
type nfsOpStats struct {
	name                                   string
	requests, transmissions, majorTimeouts uint64
	rttMillis, executeMillis               uint64
}

// nfsMountStats is what the collector exports of one NFS mount.
type nfsMountStats struct {
	// device and mountpoint are as the kernel wrote them, still escaped.
	device, mountpoint string
	// vers, proto and addr are mount options; "" when absent.
	vers, proto, addr string

	readBytes, writeBytes, directReadBytes, directWriteBytes uint64
	serverReadBytes, serverWriteBytes                        uint64

	// Transport counters, summed over the mount's transports.
	transports                                  int
	transportProto                              string // the first transport's
	connects, sends, receives, badXIDs, backlog uint64

	retransmissions uint64
	// ops are the operations with requests or transmissions, in file order.
	ops []nfsOpStats
}

// readMountstatsFile reads path into buf, growing it up to limit bytes
// (maxMountstatsSize outside tests), and returns the grown buffer so that
// the caller can reuse it.
func readMountstatsFile(path string, buf []byte, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	// /proc files have no size, so read until EOF.
	buf = buf[:0]
	for {
		if len(buf) > limit {
			return buf, fmt.Errorf("%s is larger than %d bytes, refusing to read it", path, limit)
		}
		if len(buf) == cap(buf) {
			// One byte over the limit tells a file of exactly limit bytes
			// from a larger one.
			buf = slices.Grow(buf, min(max(len(buf), 64<<10), limit+1-len(buf)))
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// mountstatsState is where the parser is in the file.
type mountstatsState int

const (
	// msTop is between blocks: only device lines matter.
	msTop mountstatsState = iota
	// msHeader is an NFS block's opts, bytes, xprt ... lines, up to the
	// "per-op statistics" line or a blank line.
	msHeader
	// msOps is the per-operation lines, up to a blank line. procfs reads
	// them after a blank header end too, and so does this parser.
	msOps
)

// maxReportedBlocks bounds the error text for a file of broken blocks.
const maxReportedBlocks = 3

// mountstatsError lists the NFS blocks that were dropped.
type mountstatsError struct {
	reported []string
	dropped  int
}

func (e *mountstatsError) Error() string {
	s := strings.Join(e.reported, "; ")
	if n := e.dropped - len(e.reported); n > 0 {
		s += fmt.Sprintf("; and %d more malformed NFS mounts", n)
	}
	return s
}

// mountstatsScratch is the memory a parse works in. The collector keeps
// the last one with the file's buffer, so that a scrape reuses what the
// last one grew and the result is built with three exact allocations: the
// mounts, their operations and one string holding every name.
type mountstatsScratch struct {
	file   []byte          // the mountstats file, for the collector
	mounts []nfsMountStats // kept mounts, still without strings and ops
	spans  []mountSpans    // their strings and operations
	ops    []nfsOpStats    // used operations of all kept mounts, without names
	names  []span          // the names of ops
	text   []byte          // the bytes of every string of the result
}

// span is a string of the result: text[start:end].
type span struct{ start, end int }

type mountSpans struct {
	device, mountpoint, vers, proto, addr span
	ops                                   int // the mount's first entry in ops
}

func (s *mountstatsScratch) addText(b []byte) span {
	start := len(s.text)
	s.text = append(s.text, b...)
	return span{start, len(s.text)}
}

// parseMountstats parses data with scratch memory of its own.
func parseMountstats(data []byte) ([]nfsMountStats, badLines, error) {
	return new(mountstatsScratch).parse(data)
}

// parse returns the NFS mounts with statistics in data, the content of a
// mountstats file. A malformed NFS block drops that mount: the mounts that
// parsed are returned with an error naming the line. bad counts each
// dropped mount's first bad line, and the lines between blocks that are no
// device line. The result refers neither to data nor to s.
func (s *mountstatsScratch) parse(data []byte) ([]nfsMountStats, badLines, error) {
	s.mounts, s.spans, s.ops, s.names, s.text = s.mounts[:0], s.spans[:0], s.ops[:0], s.names[:0], s.text[:0]
	var (
		cur      nfsMountStats
		curOps   int // len(s.ops) and len(s.text) when the block started
		curText  int
		device   []byte // the block's strings, in data until it is kept
		mount    []byte
		vers     []byte
		proto    []byte
		addr     []byte
		blockErr string // the first error of the block
		errs     *mountstatsError
		bad      badLines
		state    = msTop
		line     []byte
	)
	fail := func(lineNo int, format string, args ...any) {
		if blockErr == "" {
			reason := fmt.Sprintf(format, args...)
			blockErr = fmt.Sprintf("line %d: NFS mount on %q dropped: ", lineNo, mount) + reason
			bad.add(lineNo, fmt.Sprintf("NFS mount on %q dropped: %s", mount, reason), string(line))
		}
	}
	finish := func() {
		if blockErr != "" {
			s.ops, s.names, s.text = s.ops[:curOps], s.names[:curOps], s.text[:curText]
			if errs == nil {
				errs = &mountstatsError{}
			}
			if len(errs.reported) < maxReportedBlocks {
				errs.reported = append(errs.reported, blockErr)
			}
			errs.dropped++
			return
		}
		s.mounts = append(s.mounts, cur)
		s.spans = append(s.spans, mountSpans{
			device: s.addText(device), mountpoint: s.addText(mount),
			vers: s.addText(vers), proto: s.addText(proto), addr: s.addText(addr),
			ops: curOps,
		})
	}

	lineNo := 0
	for len(data) > 0 {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		lineNo++
		first, rest := nextField(line)

		switch state {
		case msTop:
			if string(first) != "device" {
				// Between blocks the kernel writes device lines only.
				if len(first) > 0 {
					bad.add(lineNo, "not a device line", string(line))
				}
				continue
			}
			// device <dev> mounted on <mnt> with fstype <type> statvers=<v>
			// Only NFS lines end with statvers=.
			var f [8][]byte
			n := splitFields(rest, f[:])
			if n < len(f)-1 || string(f[1]) != "mounted" || string(f[2]) != "on" ||
				string(f[4]) != "with" || string(f[5]) != "fstype" {
				bad.add(lineNo, "not 'device D mounted on M with fstype T'", string(line))
				continue
			}
			if string(f[6]) != "nfs" && string(f[6]) != "nfs4" {
				continue
			}
			if n < len(f) {
				bad.add(lineNo, "NFS device line without statvers=", string(line))
				continue
			}
			cur = nfsMountStats{}
			curOps, curText = len(s.ops), len(s.text)
			device, mount = f[0], f[3]
			vers, proto, addr = nil, nil, nil
			blockErr = ""
			state = msHeader

		case msHeader:
			switch string(first) {
			case "", "per-op":
				state = msOps
			case "opts:":
				// Only the first field after opts: holds options, as in
				// procfs. An option without '=' sets the key to "" there,
				// and so here; one with two '=' sets another key.
				opts, _ := nextField(rest)
				for len(opts) > 0 {
					var opt []byte
					if i := bytes.IndexByte(opts, ','); i >= 0 {
						opt, opts = opts[:i], opts[i+1:]
					} else {
						opt, opts = opts, nil
					}
					key, value := opt, []byte(nil)
					if i := bytes.IndexByte(opt, '='); i >= 0 {
						key, value = opt[:i], opt[i+1:]
						if bytes.IndexByte(value, '=') >= 0 {
							continue
						}
					}
					switch string(key) {
					case "vers":
						vers = value
					case "proto":
						proto = value
					case "addr":
						addr = value
					}
				}
			case "bytes:":
				if blockErr != "" {
					continue
				}
				var n [6]uint64
				if got, bad := parseNumbers(rest, n[:]); bad != nil {
					fail(lineNo, "bytes: %q is not a number", bad)
				} else if got < len(n) {
					fail(lineNo, "bytes: %d numbers, want at least %d", got, len(n))
				} else {
					cur.readBytes, cur.writeBytes = n[0], n[1]
					cur.directReadBytes, cur.directWriteBytes = n[2], n[3]
					cur.serverReadBytes, cur.serverWriteBytes = n[4], n[5]
				}
			case "xprt:":
				if blockErr != "" {
					continue
				}
				protoField, rest := nextField(rest)
				// The layout of each transport's numbers is in the kernel's
				// xs_tcp_print_stats, xs_udp_print_stats and
				// xprt_rdma_print_stats, explained at
				// https://utcc.utoronto.ca/~cks/space/blog/linux/NFSMountstatsXprt
				// and followed by procfs's parseNFSTransportStats. udp has no
				// connect count, connect time and idle time, so its later
				// fields come three places earlier; rdma starts as tcp does.
				var n [10]uint64
				want, connect, sends, receives, badXIDs, backlog := 10, 2, 5, 6, 7, 9
				var protoName string
				switch string(protoField) {
				case "tcp":
					protoName = "tcp"
				case "rdma":
					protoName = "rdma"
				case "udp":
					protoName = "udp"
					want, connect, sends, receives, badXIDs, backlog = 7, -1, 2, 3, 4, 6
				default:
					fail(lineNo, "xprt: unknown transport %q", protoField)
					continue
				}
				got, bad := parseNumbers(rest, n[:want])
				if bad != nil {
					fail(lineNo, "xprt: %q is not a number", bad)
					continue
				}
				if got < want {
					fail(lineNo, "xprt: %d numbers for %s, want at least %d", got, protoName, want)
					continue
				}
				if cur.transports == 0 {
					cur.transportProto = protoName
				}
				cur.transports++
				if connect >= 0 {
					cur.connects += n[connect]
				}
				cur.sends += n[sends]
				cur.receives += n[receives]
				cur.badXIDs += n[badXIDs]
				cur.backlog += n[backlog]
			}

		case msOps:
			if len(first) == 0 {
				finish()
				state = msTop
				continue
			}
			if blockErr != "" {
				continue
			}
			// NAME: requests transmissions major_timeouts bytes_sent
			// bytes_received queue_ms rtt_ms execute_ms [errors]
			name := first
			if name[len(name)-1] == ':' {
				name = name[:len(name)-1]
			}
			var n [8]uint64
			got, bad := parseNumbers(rest, n[:])
			if bad != nil {
				fail(lineNo, "operation %q: %q is not a number", name, bad)
				continue
			}
			if got < len(n) {
				fail(lineNo, "operation %q: %d numbers, want at least %d", name, got, len(n))
				continue
			}
			requests, transmissions := n[0], n[1]
			if transmissions > requests {
				cur.retransmissions += transmissions - requests
			}
			// The collector exports only used operations.
			if requests == 0 && transmissions == 0 {
				continue
			}
			s.ops = append(s.ops, nfsOpStats{
				requests:      requests,
				transmissions: transmissions,
				majorTimeouts: n[2],
				rttMillis:     n[6],
				executeMillis: n[7],
			})
			s.names = append(s.names, s.addText(name))
		}
	}
	// A block that ends with the file is complete, as in procfs.
	if state != msTop {
		finish()
	}

	mounts := s.result()
	if errs != nil {
		return mounts, bad, errs
	}
	return mounts, bad, nil
}

// result copies the kept mounts and their operations out of s.
func (s *mountstatsScratch) result() []nfsMountStats {
	if len(s.mounts) == 0 {
		return nil
	}
	text := string(s.text)
	str := func(sp span) string { return text[sp.start:sp.end] }
	ops := make([]nfsOpStats, len(s.ops))
	copy(ops, s.ops)
	for i := range ops {
		ops[i].name = str(s.names[i])
	}
	mounts := make([]nfsMountStats, len(s.mounts))
	copy(mounts, s.mounts)
	for i := range mounts {
		m, sp := &mounts[i], &s.spans[i]
		m.device, m.mountpoint = str(sp.device), str(sp.mountpoint)
		m.vers, m.proto, m.addr = str(sp.vers), str(sp.proto), str(sp.addr)
		end := len(ops)
		if i+1 < len(mounts) {
			end = s.spans[i+1].ops
		}
		if sp.ops < end {
			m.ops = ops[sp.ops:end:end]
		}
	}
	return mounts
}

// asciiSpace has a bit set for each byte strings.Fields splits on within a
// line. The kernel escapes blanks in device and mount point names, so
// fields never contain them.
const asciiSpace = 1<<' ' | 1<<'\t' | 1<<'\v' | 1<<'\f' | 1<<'\r'

func isASCIISpace(c byte) bool { return c <= ' ' && asciiSpace&(uint64(1)<<c) != 0 }

// nextField returns the first field of b and what follows it.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isASCIISpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isASCIISpace(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

// splitFields fills dst with the first len(dst) fields of b and returns
// how many there were.
func splitFields(b []byte, dst [][]byte) int {
	for i := range dst {
		f, rest := nextField(b)
		if len(f) == 0 {
			return i
		}
		dst[i], b = f, rest
	}
	return len(dst)
}

// parseNumbers parses the first len(dst) fields of b as decimal numbers
// into dst. It returns how many fields there were, or the first field that
// is not a number; fields after len(dst) are not looked at.
func parseNumbers(b []byte, dst []uint64) (int, []byte) {
	for i := range dst {
		f, rest := nextField(b)
		if len(f) == 0 {
			return i, nil
		}
		n, ok := parseDecimal(f)
		if !ok {
			return i, f
		}
		dst[i], b = n, rest
	}
	return len(dst), nil
}

// parseDecimal accepts what strconv.ParseUint(s, 10, 64) accepts, as
// procfs parses with it.
func parseDecimal(b []byte) (uint64, bool) {
	// 19 digits cannot overflow a uint64.
	if len(b) == 0 || len(b) > 19 {
		n, err := strconv.ParseUint(string(b), 10, 64)
		return n, err == nil
	}
	var n uint64
	for _, c := range b {
		c -= '0'
		if c > 9 {
			return 0, false
		}
		n = n*10 + uint64(c)
	}
	return n, true
}
