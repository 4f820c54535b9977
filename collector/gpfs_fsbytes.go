package collector

import (
	"time"

	dto "github.com/prometheus/client_model/go"
)

// GPFSFSBytes returns the bytes this node has read from and written to the
// GPFS file system (the device name mmpmon's fs_io_s answers with, _fs_,
// e.g. "scratch" for /dev/scratch) as of the gpfs collector's last mmpmon
// run, and when that run started. It runs nothing: the values are those of
// the background refresh (--collector.gpfs.interval), so their resolution
// is that interval. ok is false without a gpfs collector, before its first
// run, or when the last answer did not name the file system. A file system
// of the same name in two clusters (a remote mount) gives the first.
func (r *Registry) GPFSFSBytes(filesystem string) (read, write uint64, at time.Time, ok bool) {
	c, found := r.collectors[gpfsSubsystem].(*gpfsCollector)
	if !found {
		return 0, 0, time.Time{}, false
	}
	return c.FSBytes(filesystem)
}

// FSBytes is GPFSFSBytes of one collector: a read-only look at the
// metrics of mmpmon's last run, under the command's lock for as long as it
// takes to copy the slice.
func (c *gpfsCollector) FSBytes(filesystem string) (read, write uint64, at time.Time, ok bool) {
	var cmd *gpfsCommand
	for _, x := range c.commands {
		if x.name == "mmpmon" {
			cmd = x
			break
		}
	}
	if cmd == nil {
		return 0, 0, time.Time{}, false
	}
	cmd.mu.Lock()
	last := cmd.last
	cmd.mu.Unlock()
	if last.started.IsZero() {
		return 0, 0, time.Time{}, false
	}
	want := labelValue(filesystem)
	type pair struct {
		read, write       uint64
		hasRead, hasWrite bool
	}
	byCluster := map[string]*pair{}
	var order []string
	for _, m := range last.metrics {
		d := m.Desc()
		isRead, isWrite := d == c.fs[fsReadBytes].desc, d == c.fs[fsWriteBytes].desc
		if !isRead && !isWrite {
			continue
		}
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.Counter == nil {
			continue
		}
		var cluster, fs string
		for _, lp := range pb.Label {
			switch lp.GetName() {
			case "cluster":
				cluster = lp.GetValue()
			case "filesystem":
				fs = lp.GetValue()
			}
		}
		if fs != want {
			continue
		}
		p := byCluster[cluster]
		if p == nil {
			p = &pair{}
			byCluster[cluster] = p
			order = append(order, cluster)
		}
		v := uint64(pb.Counter.GetValue())
		if isRead {
			p.read, p.hasRead = v, true
		} else {
			p.write, p.hasWrite = v, true
		}
	}
	for _, cl := range order {
		if p := byCluster[cl]; p.hasRead && p.hasWrite {
			return p.read, p.write, last.started, true
		}
	}
	return 0, 0, time.Time{}, false
}
