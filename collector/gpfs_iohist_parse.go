package collector

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// "mmdiag --iohist" lists the node's most recent I/Os (ioHistorySize, 512
// by default), one row each. The table form, as Storage Scale 4.x and 5.x
// print it (and GPFS 3.x before them, without the NSD node column):
//
//	 I/O start time RW    Buf type disk:sectorNum     nSec  time ms  Type  Device/NSD ID         NSD node
//	--------------- -- ----------- ----------------- -----  ------- ---- ------------------ ---------------
//	14:25:22.169617  R        data    1:1075622848     2048   13.986  cli   C0A82D05:5D6E8A17  192.168.2.60
//	14:25:22.182723  R       inode    2:1075622904        8    4.236  srv   dm-92              192.168.45.5
//
// On a client a row of type cli is an I/O sent to the NSD server named in
// the NSD node column, and its time includes the network round trip and
// the server's queueing; on an NSD server a row of type srv (or lcl, a
// disk the node reaches directly) is the local disk I/O alone, on the
// device named in the Device column. "verbose" adds columns after NSD
// node. The -Y form (Storage Scale 5.1 and later: "--iohist [verbose]
// [-Y]") names its fields in a HEADER; the names read here are those the
// REST API's iohist endpoint documents for the same data (ioStartHour,
// ioStartMin, ioStartSec, rw, bufType, disk, sectorNum, ioTimeMS, ioType,
// devName, nsdNode), or ioStartTime.

// iohistEntry is one I/O of the history.
type iohistEntry struct {
	// start is the start time as printed (time of day), second its
	// seconds since midnight.
	start  string
	second float64
	write  bool
	// metadata is every buffer type but data: inode, indirect blocks,
	// directory blocks, log, allocation maps, descriptors.
	metadata bool
	// diskSector is disk:sectorNum as printed.
	diskSector string
	seconds    float64
	// kind is the Type column: cli, srv, lcl (others are read and not
	// exported).
	kind string
	// peer is the NSD server of a cli row, the local device of a srv or
	// lcl row.
	peer string
}

// iohistKey identifies an I/O across reads of the history: the same start
// time, direction and disk:sector is the same I/O.
type iohistKey struct {
	start, diskSector string
	write             bool
}

func (e *iohistEntry) key() iohistKey {
	return iohistKey{e.start, e.diskSector, e.write}
}

// parseTimeOfDay reads HH:MM:SS[.frac] into seconds since midnight.
func parseTimeOfDay(s string) (float64, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, false
	}
	h, err1 := strconv.Atoi(parts[0])
	m, err2 := strconv.Atoi(parts[1])
	sec, err3 := strconv.ParseFloat(parts[2], 64)
	if err1 != nil || err2 != nil || err3 != nil || h < 0 || h > 23 || m < 0 || m > 59 ||
		!(sec >= 0 && sec < 61) || len(parts[2]) < 2 || parts[2][0] < '0' || parts[2][0] > '9' {
		return 0, false
	}
	return float64(h*3600+m*60) + sec, true
}

// iohistDecoration is a line of the table form that holds no row.
func iohistDecoration(line string) bool {
	for _, p := range []string{"===", "I/O history", "I/O start time", "---"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// newIohistEntry checks and builds an entry from its fields; reason says
// which one is wrong.
func newIohistEntry(start, rw, bufType, diskSector, nSec, ms, kind, peer string) (iohistEntry, string) {
	e := iohistEntry{start: start, diskSector: diskSector, kind: kind, peer: peer}
	var ok bool
	if e.second, ok = parseTimeOfDay(start); !ok {
		return e, fmt.Sprintf("I/O start time %q is not HH:MM:SS", start)
	}
	switch rw {
	case "R", "r":
	case "W", "w":
		e.write = true
	default:
		return e, fmt.Sprintf("RW %q is neither R nor W", rw)
	}
	if bufType == "" {
		return e, "empty buffer type"
	}
	e.metadata = !strings.EqualFold(bufType, "data")
	disk, sector, found := strings.Cut(diskSector, ":")
	if _, err := strconv.ParseUint(disk, 10, 32); !found || err != nil {
		return e, fmt.Sprintf("disk:sectorNum %q is not two numbers", diskSector)
	}
	if _, err := strconv.ParseUint(sector, 10, 64); err != nil {
		return e, fmt.Sprintf("disk:sectorNum %q is not two numbers", diskSector)
	}
	if nSec != "" {
		if _, err := strconv.ParseUint(nSec, 10, 64); err != nil {
			return e, fmt.Sprintf("nSec %q is not a number", nSec)
		}
	}
	v, err := parseLocaleFloat(ms)
	if err != nil || !(v >= 0) || math.IsInf(v, 0) {
		return e, fmt.Sprintf("time ms %q is not a number of milliseconds", ms)
	}
	e.seconds = v / 1000
	if kind == "" {
		return e, "empty I/O type"
	}
	return e, ""
}

// parseIohist reads either form of "mmdiag --iohist". A row it cannot read
// is skipped and counted in bad; output with rows but none readable fails.
// No row at all (an idle node, a fresh daemon) is an empty history.
func parseIohist(out []byte) ([]iohistEntry, badLines, error) {
	if bytes.HasPrefix(out, []byte("mmdiag:")) || bytes.Contains(out, []byte("\nmmdiag:iohist:")) {
		return parseIohistY(out)
	}
	var bad badLines
	var entries []iohistEntry
	rows := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), maxCommandOutput)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || iohistDecoration(line) {
			continue
		}
		rows++
		f := strings.Fields(line)
		if len(f) < 7 {
			bad.add(lineNo, "fewer than 7 fields", line)
			continue
		}
		peer := ""
		switch f[6] {
		case "cli":
			// The NSD node column; older releases print none.
			if len(f) > 8 {
				peer = f[8]
			}
		default:
			if len(f) > 7 {
				peer = f[7]
			}
		}
		e, reason := newIohistEntry(f[0], f[1], f[2], f[3], f[4], f[5], f[6], peer)
		if reason != "" {
			bad.add(lineNo, reason, line)
			continue
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return entries, bad, fmt.Errorf("mmdiag --iohist: %w", err)
	}
	if rows > 0 && len(entries) == 0 {
		return nil, bad, fmt.Errorf("mmdiag --iohist: none of the %d rows could be read (first %s)", rows, bad.first)
	}
	return entries, bad, nil
}

// parseIohistY reads the -Y form by the names of its HEADER.
func parseIohistY(out []byte) ([]iohistEntry, badLines, error) {
	t, bad, err := parseYTable(out, "mmdiag --iohist -Y", "mmdiag", "iohist")
	if err != nil {
		return nil, bad, err
	}
	if t == nil {
		return nil, bad, missingYHeader("mmdiag --iohist -Y", "mmdiag", "iohist", bad)
	}
	col := func(names ...string) int {
		for _, n := range names {
			if c := t.column(n); c >= 0 {
				return c
			}
		}
		return -1
	}
	startCol, hourCol, minCol, secCol := col("ioStartTime"), col("ioStartHour"), col("ioStartMin"), col("ioStartSec")
	rwCol, bufCol, diskCol, sectorCol := col("rw"), col("bufType"), col("disk"), col("sectorNum")
	nSecCol, msCol, typeCol := col("nSec", "numSectors"), col("ioTimeMS", "timeMs"), col("ioType", "type")
	devCol, nodeCol := col("devName", "device"), col("nsdNode")
	if (startCol < 0 && (hourCol < 0 || minCol < 0 || secCol < 0)) || rwCol < 0 || bufCol < 0 || diskCol < 0 || msCol < 0 || typeCol < 0 {
		return nil, bad, fmt.Errorf("mmdiag --iohist -Y: HEADER lacks one of the start time, rw, bufType, disk, ioTimeMS and ioType columns")
	}
	var entries []iohistEntry
	for i, row := range t.rows {
		start := t.value(row, startCol)
		if startCol < 0 {
			start = t.value(row, hourCol) + ":" + t.value(row, minCol) + ":" + t.value(row, secCol)
		}
		diskSector := t.value(row, diskCol)
		if sectorCol >= 0 {
			diskSector += ":" + t.value(row, sectorCol)
		}
		kind := t.value(row, typeCol)
		peer := t.value(row, devCol)
		if kind == "cli" {
			peer = t.value(row, nodeCol)
		}
		e, reason := newIohistEntry(start, t.value(row, rwCol), t.value(row, bufCol), diskSector,
			t.value(row, nSecCol), t.value(row, msCol), kind, peer)
		if reason != "" {
			t.badRow(&bad, i, reason)
			continue
		}
		entries = append(entries, e)
	}
	if len(t.rows) > 0 && len(entries) == 0 {
		return nil, bad, fmt.Errorf("mmdiag --iohist -Y: none of the %d rows could be read (first %s)", len(t.rows), bad.first)
	}
	return entries, bad, nil
}

// iohistRing follows the history across reads. The history is a ring of
// the last N I/Os: a read shows the I/Os of the previous read that have
// not been pushed out yet, and the new ones. Each I/O is counted once, by
// its key; when a full history shares no I/O with the previous read, the
// ring turned over between the two and some I/Os were never read, which
// lost estimates from the rate of the I/Os that were.
type iohistRing struct {
	seen map[iohistKey]struct{}
	// last is the latest start (seconds since midnight) of the previous
	// read, size the longest history read so far.
	last float64
	size int
	read bool
}

// iohistRound is what one read added.
type iohistRound struct {
	fresh   []iohistEntry
	wrapped bool
	lost    int
}

// dayDelta is b-a on a 24-hour clock, in (-12h, 12h].
func dayDelta(a, b float64) float64 {
	d := math.Mod(b-a, 86400)
	if d > 43200 {
		d -= 86400
	} else if d <= -43200 {
		d += 86400
	}
	return d
}

func (r *iohistRing) advance(entries []iohistEntry) iohistRound {
	var res iohistRound
	next := make(map[iohistKey]struct{}, len(entries))
	overlap := false
	for i := range entries {
		k := entries[i].key()
		if _, dup := next[k]; dup {
			continue
		}
		next[k] = struct{}{}
		if _, old := r.seen[k]; old {
			overlap = true
			continue
		}
		res.fresh = append(res.fresh, entries[i])
	}
	if len(next) == 0 {
		// An empty read (the daemon restarted, or mmdiag printed no
		// row) keeps what was seen, so that a history that comes back
		// unchanged is not counted again.
		return res
	}
	// The history's span, on a clock that may have passed midnight: the
	// times relative to the first row's.
	ref := entries[0].second
	lo, hi := 0.0, 0.0
	for i := range entries {
		d := dayDelta(ref, entries[i].second)
		lo, hi = min(lo, d), max(hi, d)
	}
	if r.read && len(r.seen) > 0 && !overlap && len(next) >= r.size {
		res.wrapped = true
		gap := dayDelta(r.last, ref+lo)
		if span := hi - lo; span > 0 && gap > 0 && len(next) > 1 {
			// The I/Os between the last one read before and the first
			// one read now, at the rate of this read's: evenly spaced
			// rows dt apart, gap/dt-1 of them were never read.
			res.lost = max(0, int(math.Round(gap*float64(len(next)-1)/span))-1)
		}
	}
	r.seen, r.read = next, true
	r.last = math.Mod(ref+hi+86400, 86400)
	r.size = max(r.size, len(next))
	return res
}

// iohistSums are the counts of one NSD server (client side) or device
// (server side): per direction and buffer class, and the native
// histogram of all their times.
type iohistSums struct {
	// ios and seconds are indexed by iohistCell.
	ios     [4]uint64
	seconds [4]float64
	hist    nativeHistogramCounts
}

// iohistCell is the index of a direction and buffer class.
func iohistCell(write, metadata bool) int {
	i := 0
	if write {
		i |= 1
	}
	if metadata {
		i |= 2
	}
	return i
}

// iohistCells are the labels of the four cells, in index order.
func iohistCells() [4][2]string {
	return [...][2]string{{"read", "data"}, {"write", "data"}, {"read", "metadata"}, {"write", "metadata"}}
}

// nativeHistogramCounts is a native histogram of schema 0 (each bucket
// twice as wide as the one below: (2^(i-1), 2^i] seconds), its zero
// bucket holding times under a microsecond. A few buckets cover the
// range of I/O times (a 1 ms I/O and a 30 s one are 15 buckets apart).
type nativeHistogramCounts struct {
	count   uint64
	sum     float64
	zero    uint64
	buckets map[int]int64
}

const iohistZeroThreshold = 1e-6

func (h *nativeHistogramCounts) observe(v float64) {
	h.count++
	h.sum += v
	if v <= iohistZeroThreshold {
		h.zero++
		return
	}
	frac, exp := math.Frexp(v)
	if frac == 0.5 {
		exp--
	}
	if h.buckets == nil {
		h.buckets = map[int]int64{}
	}
	h.buckets[exp]++
}

// iohistTotals are the running totals the collector exports.
type iohistTotals struct {
	clients map[string]*iohistSums // by NSD server
	disks   map[string]*iohistSums // by local device
	lost    uint64
	wraps   uint64
	entries int
	// overflow counts the I/Os of servers or devices past the limit.
	overflow uint64
}

// maxIohistPeers bounds the servers and devices followed: a history names
// at most its ring's size of them per read, but a run of odd output
// should not grow the exporter's series for ever.
const maxIohistPeers = 4096

func (t *iohistTotals) add(fresh []iohistEntry) {
	if t.clients == nil {
		t.clients, t.disks = map[string]*iohistSums{}, map[string]*iohistSums{}
	}
	for i := range fresh {
		e := &fresh[i]
		var m map[string]*iohistSums
		switch e.kind {
		case "cli":
			m = t.clients
		case "srv", "lcl":
			m = t.disks
		default:
			continue
		}
		peer := labelValue(e.peer)
		if peer == "" {
			peer = "unknown"
		}
		s := m[peer]
		if s == nil {
			if len(m) >= maxIohistPeers {
				t.overflow++
				continue
			}
			s = &iohistSums{}
			m[peer] = s
		}
		c := iohistCell(e.write, e.metadata)
		s.ios[c]++
		s.seconds[c] += e.seconds
		s.hist.observe(e.seconds)
	}
}

// sortedKeys returns the keys of m in order, for a stable exposition.
func sortedKeys(m map[string]*iohistSums) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
