package schedule

import (
	"hash/fnv"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// SlotOffset spreads a fleet: each (host, target, probe) gets a fixed offset
// within the interval, as Prometheus offsets its scrapes, so thousands of
// nodes do not probe a shared file system at the same instant and a restart
// keeps a node's slot.
func SlotOffset(hostname, target, probe string, interval time.Duration) time.Duration {
	h := fnv.New64a()
	for _, s := range []string{hostname, target, probe} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return time.Duration(h.Sum64() % uint64(interval))
}

// ProbeOffset is the offset of a probe's slots on a host, as the scheduler
// runs it: SlotOffset at the probe's (possibly stretched) interval with
// splay on, 0 with splay off, where every node runs at the same instants.
func ProbeOffset(hostname, target string, p *probe.ProbeConfig) time.Duration {
	if !p.Splay {
		return 0
	}
	return SlotOffset(hostname, target, p.Name, p.Interval)
}

// NextSlot is the first instant at or after now where
// (unix time - offset) mod interval == 0.
func NextSlot(now time.Time, offset, interval time.Duration) time.Time {
	// Unix time always exceeds the offset (less than one interval), so the
	// division below rounds up a positive number.
	n := now.UnixNano() - int64(offset)
	iv := int64(interval)
	k := (n + iv - 1) / iv
	return time.Unix(0, k*iv+int64(offset))
}
