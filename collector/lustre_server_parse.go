package collector

// Parsers of the Lustre server's statistics: the counter files of an OST
// (obdfilter.<target>.stats) and an MDT (mdt.<target>.md_stats), printed by
// lprocfs_stats_seq_show in lustre/obdclass/lprocfs_status.c, and the
// per-job statistics of either (job_stats, lprocfs_jobstats_seq_show in
// lustre/obdclass/lprocfs_jobstats.c). Like the client's parsers, each
// keeps every line it can read and counts the others.
//
// job_stats can list tens of thousands of jobs on a busy server, tens of
// megabytes of text: its parser reads a stream line by line and keeps only
// the top N jobs in a heap of N, so the memory of a round does not grow
// with the number of jobs.

import (
	"bufio"
	"bytes"
	"container/heap"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// parseLustreServerStats reads an obdfilter stats or mdt md_stats file:
//
//	snapshot_time             1733212800.123456789 secs.nsecs
//	read_bytes                19230 samples [bytes] 4096 4194304 60129542144 ...
//	getattr                   1877 samples [usecs] 3 912 40581 ...
//
// Counters with a zero count are not printed. The line format is the one
// the client's llite stats use (parseLustreStats reads those through this
// parser); the bad lines are returned as badLines, with the first one's
// text, for plateau_collector_parse_errors_total.
func parseLustreServerStats(data []byte) (map[string]lustreCounter, badLines) {
	counters := map[string]lustreCounter{}
	var bad badLines
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "snapshot_time", "start_time", "elapsed_time":
			continue
		}
		if len(f) < 4 || f[2] != "samples" || !strings.HasPrefix(f[3], "[") || !strings.HasSuffix(f[3], "]") {
			bad.add(i+1, "not a counter line", line)
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			bad.add(i+1, "bad count", line)
			continue
		}
		c := lustreCounter{count: n}
		if len(f) >= 7 {
			if c.sum, err = strconv.ParseUint(f[6], 10, 64); err != nil {
				bad.add(i+1, "bad sum", line)
				continue
			}
			c.hasSum = true
		}
		counters[f[0]] = c
	}
	return counters, bad
}

// lustreJob is what the collector keeps of one job of a target's
// job_stats.
type lustreJob struct {
	id                    string
	readBytes, writeBytes uint64
	// ops adds the samples of every counter other than the byte ones
	// and the read and write latencies (which count the same calls as
	// read_bytes and write_bytes): the job's requests of other kinds.
	ops uint64
}

func (j lustreJob) bytes() uint64 { return j.readBytes + j.writeBytes }

// lustreJobLess orders jobs by bytes moved, then (for an MDT, where most
// jobs move none) by operations, then by id so that the order is total.
func lustreJobLess(a, b lustreJob) bool {
	if a.bytes() != b.bytes() {
		return a.bytes() < b.bytes()
	}
	if a.ops != b.ops {
		return a.ops < b.ops
	}
	return a.id > b.id
}

// lustreJobHeap is a min-heap of the jobs kept so far: its root is the
// first one to give up its place.
type lustreJobHeap []lustreJob

func (h lustreJobHeap) Len() int           { return len(h) }
func (h lustreJobHeap) Less(i, j int) bool { return lustreJobLess(h[i], h[j]) }
func (h lustreJobHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lustreJobHeap) Push(x any)        { *h = append(*h, x.(lustreJob)) }
func (h *lustreJobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	*h = old[:len(old)-1]
	return j
}

// lustreJobStats is what parseLustreJobStats keeps of a job_stats file.
type lustreJobStats struct {
	// top are the top jobs, most bytes first.
	top []lustreJob
	// rest adds up every other job; its id is empty.
	rest lustreJob
	// jobs counts the jobs the file listed, rest included.
	jobs int
}

// lustreJobTop keeps the top n jobs and adds up the others.
type lustreJobTop struct {
	n    int
	heap lustreJobHeap
	rest lustreJob
	jobs int
}

func (t *lustreJobTop) add(j lustreJob) {
	t.jobs++
	switch {
	case len(t.heap) < t.n:
		heap.Push(&t.heap, j)
	case t.n > 0 && lustreJobLess(t.heap[0], j):
		t.rest.addUp(t.heap[0])
		t.heap[0] = j
		heap.Fix(&t.heap, 0)
	default:
		t.rest.addUp(j)
	}
}

func (j *lustreJob) addUp(o lustreJob) {
	j.readBytes += o.readBytes
	j.writeBytes += o.writeBytes
	j.ops += o.ops
}

func (t *lustreJobTop) result() lustreJobStats {
	top := append([]lustreJob(nil), t.heap...)
	sort.Slice(top, func(a, b int) bool { return lustreJobLess(top[b], top[a]) })
	return lustreJobStats{top: top, rest: t.rest, jobs: t.jobs}
}

// maxLustreLine bounds the length of a job_stats line the parser reads; a
// longer one (no real line is over 200 bytes) is counted and skipped.
const maxLustreLine = 4096

// parseLustreJobStats reads a job_stats file from r and keeps the top n
// jobs by bytes:
//
//	job_stats:
//	- job_id:          slurm.4812345
//	  snapshot_time:   1733212795.418372911 secs.nsecs
//	  read_bytes:      { samples:  1204, unit: bytes, min: 4096, max: 4194304, sum: 4311744512, sumsq: ... }
//	  write_bytes:     { samples:     0, unit: bytes, min:    0, max:       0, sum:          0, sumsq: 0 }
//	  getattr:         { samples:     3, unit: usecs, min:   12, max:      40, sum:         71, sumsq: 1905 }
//
// (before 2.12 the request counters' unit is reqs and they have no min,
// max or sum). A counter line before any job_id, or one that does not
// read, costs that line; the error is the stream's, never the content's.
func parseLustreJobStats(r io.Reader, n int) (lustreJobStats, badLines, error) {
	p := lustreJobParser{top: lustreJobTop{n: n, heap: make(lustreJobHeap, 0, n)}}
	br := bufio.NewReaderSize(r, maxLustreLine)
	for {
		raw, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Skip the rest of an overlong line and count it once.
			p.lineNo++
			p.bad.add(p.lineNo, "line too long", string(raw))
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
		} else if len(raw) > 0 {
			p.line(raw)
		}
		if err == io.EOF {
			return p.finish(), p.bad, nil
		}
		if err != nil {
			return p.finish(), p.bad, fmt.Errorf("reading job_stats after line %d: %w", p.lineNo, err)
		}
	}
}

// lustreJobParser is the state of parseLustreJobStats between lines.
type lustreJobParser struct {
	top    lustreJobTop
	bad    badLines
	cur    lustreJob
	inJob  bool
	lineNo int
}

// line reads one line. It works on the reader's bytes, which the next
// read overwrites: only a job's id is copied, so that the allocations of a
// parse grow with the number of jobs, not of lines.
func (p *lustreJobParser) line(line []byte) {
	p.lineNo++
	t := bytes.TrimSpace(line)
	if len(t) == 0 || string(t) == "job_stats:" {
		return
	}
	if id, ok := bytes.CutPrefix(t, []byte("- job_id:")); ok {
		id = bytes.TrimSpace(id)
		if len(id) == 0 {
			p.bad.add(p.lineNo, "empty job_id", string(line))
			return
		}
		jobID, ok := unquoteLustreJobID(id)
		if !ok {
			p.bad.add(p.lineNo, "bad quoted job_id", string(line))
			return
		}
		if p.inJob {
			p.top.add(p.cur)
		}
		p.cur, p.inJob = lustreJob{id: jobID}, true
		return
	}
	key, value, ok := bytes.Cut(t, []byte(":"))
	if !ok {
		p.bad.add(p.lineNo, "no key", string(line))
		return
	}
	switch string(key) {
	case "snapshot_time", "start_time", "elapsed_time":
		return
	}
	samples, sum, ok := parseLustreJobCounter(value)
	switch {
	case !ok:
		p.bad.add(p.lineNo, "bad counter", string(line))
		return
	case !p.inJob:
		p.bad.add(p.lineNo, "counter before any job_id", string(line))
		return
	}
	switch string(key) {
	case "read_bytes":
		p.cur.readBytes += sum
	case "write_bytes":
		p.cur.writeBytes += sum
	case "read", "write":
		// The latencies of the calls read_bytes and write_bytes count.
	default:
		p.cur.ops += samples
	}
}

// unquoteLustreJobID returns the job id that a job_stats line names. Since
// 2.15.2 lprocfs_jobstats_seq_show quotes an id with characters other than
// letters, digits and ".@-_" and writes each of those as \xHH (2.15 so
// writes ':' as \x3A); 2.16 leaves ':' and '/' as they are but still
// quotes an id that has one, or that starts with '@'. The id is decoded
// as the kernel's own job_stats write handler decodes it, so that the same
// job has the same job_id label whichever release printed it.
func unquoteLustreJobID(id []byte) (string, bool) {
	inner, ok := bytes.CutPrefix(id, []byte(`"`))
	if !ok {
		return string(id), !bytes.HasSuffix(id, []byte(`"`))
	}
	if inner, ok = bytes.CutSuffix(inner, []byte(`"`)); !ok || len(inner) == 0 {
		return "", false
	}
	out := make([]byte, 0, len(inner))
	for i := 0; i < len(inner); i++ {
		if inner[i] != '\\' {
			out = append(out, inner[i])
			continue
		}
		if i+3 >= len(inner) || inner[i+1] != 'x' {
			return "", false
		}
		b, err := strconv.ParseUint(string(inner[i+2:i+4]), 16, 8)
		if err != nil {
			return "", false
		}
		out = append(out, byte(b))
		i += 3
	}
	return string(out), true
}

func (p *lustreJobParser) finish() lustreJobStats {
	if p.inJob {
		p.top.add(p.cur)
		p.inJob = false
	}
	return p.top.result()
}

// parseLustreJobCounter reads "{ samples: 12, unit: bytes, min: 4096,
// max: 8192, sum: 65536, sumsq: ... }" and returns samples and sum (0
// when the counter keeps none). The numbers are read with parseDecimal
// (nfs_mountstats.go), which does not copy them.
func parseLustreJobCounter(v []byte) (samples, sum uint64, ok bool) {
	inner, found := bytes.CutPrefix(bytes.TrimSpace(v), []byte("{"))
	if !found {
		return 0, 0, false
	}
	if inner, found = bytes.CutSuffix(inner, []byte("}")); !found {
		return 0, 0, false
	}
	hasSamples := false
	for len(inner) > 0 {
		var field []byte
		field, inner, _ = bytes.Cut(inner, []byte(","))
		k, val, found := bytes.Cut(field, []byte(":"))
		if !found {
			return 0, 0, false
		}
		switch string(bytes.TrimSpace(k)) {
		case "samples":
			if samples, ok = parseDecimal(bytes.TrimSpace(val)); !ok {
				return 0, 0, false
			}
			hasSamples = true
		case "sum":
			if sum, ok = parseDecimal(bytes.TrimSpace(val)); !ok {
				return 0, 0, false
			}
		}
	}
	return samples, sum, hasSamples
}

// lustreRecovery is what the collector keeps of a target's recovery_status.
type lustreRecovery struct {
	// status is INACTIVE, COMPLETE, WAITING_FOR_CLIENTS, WAITING or
	// RECOVERING; empty when the file had no status line.
	status string
	// connected and total are connected_clients while recovering, and
	// completed_clients once COMPLETE: clients back of those the target
	// had before it restarted. hasClients is false when neither line was
	// there (INACTIVE, WAITING_FOR_CLIENTS).
	connected, total uint64
	hasClients       bool
	// remaining is time_remaining, in seconds, while RECOVERING.
	remaining    uint64
	hasRemaining bool
}

// recovering reports whether the target is not yet serving every client
// as usual: it waits for them to reconnect and replay.
func (r lustreRecovery) recovering() bool {
	switch r.status {
	case "RECOVERING", "WAITING_FOR_CLIENTS", "WAITING":
		return true
	}
	return false
}

// parseLustreRecoveryStatus reads a target's recovery_status as
// lprocfs_recovery_status_seq_show (lustre/obdclass/lprocfs_status_server.c)
// prints it:
//
//	status: RECOVERING
//	recovery_start: 1620920843
//	time_remaining: 119
//	connected_clients: 3/7
//	completed_clients: 3
//
// or "status: COMPLETE" with "completed_clients: 8/8", or a status alone
// (INACTIVE, WAITING_FOR_CLIENTS). Lines of other keys are skipped; a
// known key whose value does not read costs its line.
func parseLustreRecoveryStatus(data []byte) (lustreRecovery, badLines) {
	var r lustreRecovery
	var bad badLines
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		key, value, ok := strings.Cut(t, ":")
		if !ok {
			bad.add(i+1, "no key", line)
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "status":
			switch value {
			case "INACTIVE", "COMPLETE", "WAITING_FOR_CLIENTS", "WAITING", "RECOVERING":
				r.status = value
			default:
				bad.add(i+1, "unknown status", line)
			}
		case "time_remaining":
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				bad.add(i+1, "bad time_remaining", line)
				continue
			}
			r.remaining, r.hasRemaining = n, true
		case "connected_clients", "completed_clients":
			a, b, ok := strings.Cut(value, "/")
			if !ok {
				// completed_clients while recovering is a bare count,
				// the part of connected_clients done replaying.
				if _, err := strconv.ParseUint(value, 10, 64); err != nil {
					bad.add(i+1, "bad client count", line)
				}
				continue
			}
			n, err1 := strconv.ParseUint(a, 10, 64)
			m, err2 := strconv.ParseUint(b, 10, 64)
			if err1 != nil || err2 != nil {
				bad.add(i+1, "bad client count", line)
				continue
			}
			r.connected, r.total, r.hasClients = n, m, true
		}
	}
	return r, bad
}
