package collector

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

const nfsSubsystem = "nfs"

var nfsMountpointInclude = kingpin.Flag("collector.nfs.mountpoint-include",
	"Regular expression the whole mount point must match for an NFS mount to be exported; empty exports all.").
	Default("").String()

func init() {
	registerCollector(nfsSubsystem, true, func(logger log.Logger) (Collector, error) {
		return newNFSCollector(procFilePath(), *nfsMountpointInclude, logger)
	})
}

// nfsOpCounter is one per-operation statistic.
type nfsOpCounter struct {
	desc typedDesc
	get  func(*nfsOpStats) float64
}

type nfsCollector struct {
	procRoot string
	include  *regexp.Regexp
	logger   log.Logger
	// scratch is the last scrape's parse memory with the file's buffer,
	// so that a scrape does not allocate them again. Not a sync.Pool: a
	// pool keeps an item in the slot of the P that put it, Get does not
	// take it from another P's, and a scrape every few seconds seldom runs
	// on the same P, so the pool mostly missed. A scrape that runs while
	// another holds the scratch makes its own.
	scratchMu sync.Mutex
	scratch   *mountstatsScratch

	info                                           typedDesc
	readBytes, writeBytes, directRead, directWrite typedDesc
	serverRead, serverWrite                        typedDesc
	retransmissions                                typedDesc
	sends, receives, badXIDs, backlog, connects    typedDesc
	ops                                            []nfsOpCounter
	// mountPairs and opPairs keep the label pairs of mounts and of their
	// operations between scrapes.
	mountPairs, opPairs *labelPairsCache
	// parseErrs counts the lines of mountstats the parser skipped.
	parseErrs *parseErrorCounter
}

// nfsSourceMountstats is the source of the collector's parse errors.
const nfsSourceMountstats = "mountstats"

func (c *nfsCollector) parseErrors() *parseErrorCounter { return c.parseErrs }

func newNFSCollector(procRoot, include string, logger log.Logger) (*nfsCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	c := &nfsCollector{procRoot: procRoot, logger: logger, parseErrs: newParseErrorCounter(logger)}
	if include != "" {
		re, err := regexp.Compile("^(?:" + include + ")$")
		if err != nil {
			return nil, fmt.Errorf("--collector.nfs.mountpoint-include: %w", err)
		}
		c.include = re
	}
	desc := descsOf(nfsSubsystem).typed
	mount := []string{"mountpoint", "export", "server"}
	counter := func(n, help string) typedDesc { return desc(n, help, prometheus.CounterValue, mount...) }
	opLabels := append(append([]string{}, mount...), "operation")
	op := func(n, help string, get func(*nfsOpStats) float64) nfsOpCounter {
		return nfsOpCounter{desc(n, help, prometheus.CounterValue, opLabels...), get}
	}
	c.info = desc("mount_info", "NFS mount of this node with its protocol version and transport; the value is always 1.",
		prometheus.GaugeValue, append(append([]string{}, mount...), "version", "protocol")...)
	c.readBytes = counter("read_bytes_total", "Bytes applications read through read() from the mount, excluding O_DIRECT.")
	c.writeBytes = counter("write_bytes_total", "Bytes applications wrote through write() to the mount, excluding O_DIRECT.")
	c.directRead = counter("direct_read_bytes_total", "Bytes applications read with O_DIRECT from the mount.")
	c.directWrite = counter("direct_write_bytes_total", "Bytes applications wrote with O_DIRECT to the mount.")
	c.serverRead = counter("total_read_bytes_total", "Bytes read from the NFS server over the wire, in total.")
	c.serverWrite = counter("total_write_bytes_total", "Bytes written to the NFS server over the wire, in total.")
	c.retransmissions = counter("retransmissions_total", "RPC transmissions beyond the first, summed over operations: requests the client had to resend.")
	c.sends = counter("transport_sends_total", "RPC requests sent on the mount's transports.")
	c.receives = counter("transport_receives_total", "RPC replies received on the mount's transports.")
	c.badXIDs = counter("transport_bad_transaction_ids_total", "Replies whose transaction ID matched no outstanding request.")
	c.backlog = counter("transport_backlog_queue_total", "Running sum of the backlog queue length at each send; divided by sends it is the average backlog.")
	c.connects = counter("transport_connects_total", "Connections made to the server; more than one per transport means reconnects.")
	c.ops = []nfsOpCounter{
		op("operations_requests_total", "Requests completed for the NFS operation.",
			func(o *nfsOpStats) float64 { return float64(o.requests) }),
		op("operations_transmissions_total", "RPC transmissions for the NFS operation, retransmissions included.",
			func(o *nfsOpStats) float64 { return float64(o.transmissions) }),
		op("operations_major_timeouts_total", "Requests of the NFS operation that hit a major timeout (the 'server not responding' message).",
			func(o *nfsOpStats) float64 { return float64(o.majorTimeouts) }),
		op("operations_response_time_seconds_total", "Round-trip time of the NFS operation, from transmission to reply, summed over requests.",
			func(o *nfsOpStats) float64 { return float64(o.rttMillis) / 1000 }),
		op("operations_request_time_seconds_total", "Execution time of the NFS operation, from queueing to completion, summed over requests.",
			func(o *nfsOpStats) float64 { return float64(o.executeMillis) / 1000 }),
	}
	c.mountPairs = newLabelPairsCache(c.readBytes.desc)
	c.opPairs = newLabelPairsCache(c.ops[0].desc.desc)
	return c, nil
}

// nfsMount is an NFS mount with its label values, made valid UTF-8.
type nfsMount struct {
	mountpoint, export, server string
	stats                      *nfsMountStats
}

func (c *nfsCollector) Update(ch chan<- prometheus.Metric) error {
	path := filepath.Join(c.procRoot, "self", "mountstats")
	mounts, malformed, err := c.readMountstats(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A wrong --path.procfs is a configuration error; a kernel
			// without mountstats has no NFS to report.
			if _, err := os.Lstat(filepath.Join(c.procRoot, "self")); err != nil {
				return fmt.Errorf("finding this process in %s: %w", c.procRoot, err)
			}
			return fmt.Errorf("no mountstats in %s: %w", c.procRoot, ErrNoData)
		}
		return fmt.Errorf("reading mountstats: %w", err)
	}
	// A malformed block dropped its mount only: the others are exported,
	// the line is counted in plateau_collector_parse_errors_total, and
	// the error fails the collector only when no mount is left.
	if malformed != nil {
		malformed = fmt.Errorf("%s: %w", path, malformed)
	}

	// A mount point can appear more than once (a mount stacked over an
	// earlier one, or the same export mounted again). Equal labels would
	// make duplicate series; the last entry is the mount that is visible.
	byLabels := map[[3]string]int{}
	var selected []nfsMount
	for i := range mounts {
		m := &mounts[i]
		mp := unescapeMountField(m.mountpoint)
		if c.include != nil && !c.include.MatchString(mp) {
			continue
		}
		export := unescapeMountField(m.device)
		nm := nfsMount{
			mountpoint: labelValue(mp),
			export:     labelValue(export),
			server:     labelValue(nfsServer(export, m.addr)),
			stats:      m,
		}
		key := [3]string{nm.mountpoint, nm.export, nm.server}
		if i, dup := byLabels[key]; dup {
			level.Debug(c.logger).Log("msg", "NFS mount listed twice, exporting the later entry", "mountpoint", mp, "export", export)
			selected[i] = nm
			continue
		}
		byLabels[key] = len(selected)
		selected = append(selected, nm)
	}
	if len(selected) == 0 {
		if malformed != nil {
			return malformed
		}
		return fmt.Errorf("no NFS mount on this node (none in %s): %w", path, ErrNoData)
	}
	sort.Slice(selected, func(i, j int) bool { return selected[i].mountpoint < selected[j].mountpoint })
	for i := range selected {
		c.updateMount(ch, &selected[i])
	}
	c.mountPairs.sweep()
	c.opPairs.sweep()
	return nil
}

// readMountstats reads and parses the mountstats file at path. err is a
// failure to read it; malformed lists NFS blocks that were dropped from
// mounts.
func (c *nfsCollector) readMountstats(path string) (mounts []nfsMountStats, malformed, err error) {
	c.scratchMu.Lock()
	s := c.scratch
	c.scratch = nil
	c.scratchMu.Unlock()
	if s == nil {
		s = new(mountstatsScratch)
	}
	s.file, err = readMountstatsFile(path, s.file, maxMountstatsSize)
	if err == nil {
		var bad badLines
		mounts, bad, malformed = s.parse(s.file)
		c.parseErrs.record(nfsSourceMountstats, bad)
	}
	// A refused file is not kept for the next scrape.
	if cap(s.file) <= maxMountstatsSize {
		c.scratchMu.Lock()
		if c.scratch == nil {
			c.scratch = s
		}
		c.scratchMu.Unlock()
	}
	return mounts, malformed, err
}

func (c *nfsCollector) updateMount(ch chan<- prometheus.Metric, m *nfsMount) {
	s := m.stats
	protocol := s.proto
	if protocol == "" {
		protocol = s.transportProto
	}
	ch <- c.info.mustNewConstMetric(1, m.mountpoint, m.export, m.server, labelValue(s.vers), labelValue(protocol))

	// All mount-level descriptors share the label names of readBytes.
	l := c.mountPairs.get(m.mountpoint, m.export, m.server)
	ch <- l.metric(&c.readBytes, float64(s.readBytes))
	ch <- l.metric(&c.writeBytes, float64(s.writeBytes))
	ch <- l.metric(&c.directRead, float64(s.directReadBytes))
	ch <- l.metric(&c.directWrite, float64(s.directWriteBytes))
	ch <- l.metric(&c.serverRead, float64(s.serverReadBytes))
	ch <- l.metric(&c.serverWrite, float64(s.serverWriteBytes))

	// With nconnect the mount has several transports; the parser adds
	// their counters.
	ch <- l.metric(&c.sends, float64(s.sends))
	ch <- l.metric(&c.receives, float64(s.receives))
	ch <- l.metric(&c.badXIDs, float64(s.badXIDs))
	ch <- l.metric(&c.backlog, float64(s.backlog))
	ch <- l.metric(&c.connects, float64(s.connects))

	// NFSv4 lists about seventy operations and most are never used on a
	// client; exporting only the used ones keeps a node with many mounts
	// to a few hundred series instead of thousands. A series appears with
	// the operation's first request. The parser keeps only those.
	for i := range s.ops {
		o := &s.ops[i]
		ol := c.opPairs.get(m.mountpoint, m.export, m.server, labelValue(o.name))
		for j := range c.ops {
			ch <- ol.metric(&c.ops[j].desc, c.ops[j].get(o))
		}
	}
	ch <- l.metric(&c.retransmissions, float64(s.retransmissions))
}

// nfsServer returns the server part of an NFS export ("host:/path",
// "[v6addr]:/path"), or the addr= mount option when the export has none.
func nfsServer(export, addr string) string {
	if strings.HasPrefix(export, "[") {
		if i := strings.Index(export, "]:"); i > 0 {
			return export[1:i]
		}
	}
	if i := strings.Index(export, ":/"); i > 0 {
		return export[:i]
	}
	if i := strings.LastIndexByte(export, ':'); i > 0 {
		return export[:i]
	}
	return addr
}

// unescapeMountField undoes the kernel's escaping of blanks, tabs, newlines
// and backslashes in mount table fields (\040, \011, \012, \134).
func unescapeMountField(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		// Only \000 to \377 are bytes; anything else is kept as is.
		if s[i] == '\\' && i+3 < len(s) && '0' <= s[i+1] && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
