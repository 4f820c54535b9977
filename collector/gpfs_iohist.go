package collector

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// The iohist collector runs "mmdiag --iohist" (gpfs_iohist_parse.go reads
// it): each I/O the node did lately, how long it took and where it went.
// On a client, the time of an I/O sent to an NSD server includes the
// network and the server's queues; on the server, the time of its own
// disk I/O does not. A client that sees one server slow while its
// siblings are not names the server; the server's own history says
// whether its disks are slow or the way to it is.
//
// The series stay small whatever the I/O: per NSD server (client side)
// and per local device (server side), counts and summed times by
// direction and buffer class, and one native histogram: nine series per
// server or device, never one per I/O, sector or thread.

var (
	gpfsIohist = kingpin.Flag("collector.gpfs.iohist",
		"Run 'mmdiag --iohist' in the background and export, per NSD server this node sends I/O to and per local disk it serves, "+
			"the I/Os and their times (plateau_gpfs_iohist_*). Off by default: it is one more root command per interval.").
		Default("false").Bool()
	gpfsIohistInterval = kingpin.Flag("collector.gpfs.iohist.interval",
		"How often 'mmdiag --iohist' runs. The history holds the node's last ioHistorySize I/Os (512 by default); "+
			"a node that does more I/Os than that in an interval loses the rest (plateau_gpfs_iohist_lost_ios_total): "+
			"shorten the interval or raise ioHistorySize.").
		Default("15s").Duration()
	gpfsIohistServerName = kingpin.Flag("collector.gpfs.iohist.server-name",
		"On an NSD server, the name its clients' iohist shows for it in the NSD node column (its GPFS daemon address, often an IP address), "+
			"exported as plateau_gpfs_iohist_server_info{nsd_server}; the rules join the server's own disk times to its clients' view by it. "+
			"Empty: the host name.").
		String()
)

type gpfsIohistDescs struct {
	ios, seconds, hist             typedDesc
	diskIOs, diskSeconds, diskHist typedDesc
	entries, lost, wraps, overflow typedDesc
	serverInfo                     typedDesc
}

func newGPFSIohistDescs() gpfsIohistDescs {
	cell := []string{"rw", "buffer_class"}
	// Every series reads `mmdiag --iohist`: type cli rows are the I/Os this
	// node sent to an NSD server, timed from the client (the server's disk,
	// its queues and the network); type srv (an NSD server's) and lcl (a
	// disk reached directly) rows are the node's own disk I/Os, the disk
	// alone. Each I/O is counted once across reads of the ring; buffer_class
	// is data, or metadata for every other buffer type. The histograms are
	// native (schema 0) so that a server costs one series, not one a bucket.
	return gpfsIohistDescs{
		ios: gpfsCounter("iohist_ios_total",
			"I/Os this node sent to the NSD server, by direction and buffer class.",
			append([]string{"nsd_server"}, cell...)),
		seconds: gpfsCounter("iohist_io_seconds_total",
			"Summed time of the I/Os this node sent to the NSD server, as the client sees it, in seconds.",
			append([]string{"nsd_server"}, cell...)),
		hist: gpfsCounter("iohist_io_duration_seconds",
			"Times of the I/Os this node sent to the NSD server, as the client sees them.",
			[]string{"nsd_server"}),
		diskIOs: gpfsCounter("iohist_disk_ios_total",
			"I/Os this node did on its own disk, by direction and buffer class.",
			append([]string{"device"}, cell...)),
		diskSeconds: gpfsCounter("iohist_disk_io_seconds_total",
			"Summed time of the I/Os this node did on its own disk, in seconds.",
			append([]string{"device"}, cell...)),
		diskHist: gpfsCounter("iohist_disk_io_duration_seconds",
			"Times of the I/Os this node did on its own disk.",
			[]string{"device"}),
		entries: gpfsGauge("iohist_entries",
			"I/Os in the history at its last read (at most ioHistorySize).", nil),
		// The history turned over between two reads: ioHistorySize is too
		// small for --collector.gpfs.iohist.interval.
		lost: gpfsCounter("iohist_lost_ios_total",
			"I/Os estimated to have left the history before a read saw them.", nil),
		wraps: gpfsCounter("iohist_wraps_total",
			"Reads of a full history that shared no I/O with the read before.", nil),
		overflow: gpfsCounter("iohist_overflow_ios_total",
			"I/Os not counted because their server or device was past the limit of those followed.", nil),
		// Type srv rows seen; nsd_server is --collector.gpfs.iohist.server-name.
		serverInfo: gpfsGauge("iohist_server_info",
			"1 on a node whose history shows disk I/O it serves, with the name its clients see it by.",
			[]string{"nsd_server"}),
	}
}

// gpfsIohistState is what the collector remembers between reads.
type gpfsIohistState struct {
	mu     sync.Mutex
	ring   iohistRing
	totals iohistTotals
	served bool
}

// iohistServerName is the flag's name, or the short host name.
func iohistServerName(flag string) string {
	if flag != "" {
		return flag
	}
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

func (c *gpfsCollector) iohist(ctx context.Context) ([]prometheus.Metric, error) {
	// Keyed apart from the waiters' mmdiag, which runs on its own
	// schedule with the same path.
	entries, err := runGPFSParsed(ctx, c, gpfsCommandLine{key: c.cfg.mmdiagPath + " --iohist", path: c.cfg.mmdiagPath,
		args: []string{"--iohist"}, source: gpfsSourceIohist}, parseIohist)
	if err != nil {
		return nil, err
	}
	return c.iohistState.round(entries, &c.iohistDescs, c.cfg.iohistServerName), nil
}

// round counts a read's new I/Os and returns the metrics of the totals.
func (s *gpfsIohistState) round(entries []iohistEntry, d *gpfsIohistDescs, serverName string) []prometheus.Metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ring.advance(entries)
	t := &s.totals
	t.add(r.fresh)
	t.entries = len(entries)
	t.lost += uint64(r.lost)
	if r.wrapped {
		t.wraps++
	}
	if len(t.disks) > 0 {
		for _, e := range r.fresh {
			if e.kind == "srv" {
				s.served = true
				break
			}
		}
	}
	ms := make([]prometheus.Metric, 0, 9*(len(t.clients)+len(t.disks))+5)
	emit := func(m map[string]*iohistSums, ios, seconds, hist *typedDesc) {
		for _, peer := range sortedKeys(m) {
			sums := m[peer]
			for i, cell := range iohistCells() {
				l := newLabelPairs(ios.desc, peer, cell[0], cell[1])
				ms = append(ms, l.metric(ios, float64(sums.ios[i])), l.metric(seconds, sums.seconds[i]))
			}
			h := &sums.hist
			buckets := make(map[int]int64, len(h.buckets))
			for k, v := range h.buckets {
				buckets[k] = v
			}
			ms = append(ms, prometheus.MustNewConstNativeHistogram(hist.desc, h.count, h.sum, buckets, nil,
				h.zero, 0, iohistZeroThreshold, time.Time{}, peer))
		}
	}
	emit(t.clients, &d.ios, &d.seconds, &d.hist)
	emit(t.disks, &d.diskIOs, &d.diskSeconds, &d.diskHist)
	ms = append(ms,
		d.entries.mustNewConstMetric(float64(t.entries)),
		d.lost.mustNewConstMetric(float64(t.lost)),
		d.wraps.mustNewConstMetric(float64(t.wraps)),
		d.overflow.mustNewConstMetric(float64(t.overflow)))
	if s.served {
		ms = append(ms, d.serverInfo.mustNewConstMetric(1, labelValue(iohistServerName(serverName))))
	}
	return ms
}
