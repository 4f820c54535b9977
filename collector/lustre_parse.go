package collector

// Parsers of the Lustre client's parameter files. The formats are those the
// kernel modules print: the import file and the state file
// (lprocfs_import_seq_show and lprocfs_state_seq_show in
// lustre/obdclass/lprocfs_status.c), the osc rpc_stats histograms
// (osc_rpc_stats_seq_show in lustre/osc/lproc_osc.c) and the generic
// counter stats that llite prints (lprocfs_stats_seq_show). Each parser
// keeps every line it can read and returns how many it could not, so that a
// format change in one line costs that line only.

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// lustreImport is what the collector reads of an OSC's or MDC's import file.
type lustreImport struct {
	// state is the import state (FULL, IDLE, DISCONN, ...); empty when
	// the file had no state line.
	state string
	// nid is current_connection, the server NID this client talks to;
	// empty when there is none.
	nid                string
	inflight, timeouts uint64
	// avgWaitMicros is rpcs.avg_waittime, in microseconds.
	avgWaitMicros                      uint64
	hasInflight, hasTimeouts, hasAvgWt bool
}

// parseLustreImport reads an import file. It is YAML-like, but the keys it
// needs are unique across the file, so lines are read by key alone: a bad
// or unknown line cannot move the ones after it into another section.
func parseLustreImport(data []byte) (imp lustreImport, bad int) {
	for _, line := range splitLines(data) {
		key, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			if strings.TrimSpace(line) != "" {
				bad++
			}
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "state":
			if !isLustreStateName(value) {
				bad++
				continue
			}
			imp.state = value
		case "current_connection":
			// 2.16 quotes the NID ("10.0.0.1@tcp", "<none>"); earlier
			// releases print it bare.
			if v, ok := strings.CutPrefix(value, `"`); ok {
				if value, ok = strings.CutSuffix(v, `"`); !ok {
					bad++
					continue
				}
			} else if strings.HasSuffix(value, `"`) {
				bad++
				continue
			}
			if value == "" || strings.ContainsAny(value, " \t\"") {
				bad++
				continue
			}
			if value == "<none>" {
				value = ""
			}
			imp.nid = value
		case "inflight", "timeouts":
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				bad++
				continue
			}
			if key == "inflight" {
				imp.inflight, imp.hasInflight = n, true
			} else {
				imp.timeouts, imp.hasTimeouts = n, true
			}
		case "avg_waittime":
			// "avg_waittime: 1487 usec" up to 2.15.6; 2.15.7 and 2.16
			// print the counter type's unit name, "usecs".
			f := strings.Fields(value)
			if len(f) != 2 || (f[1] != "usec" && f[1] != "usecs") {
				bad++
				continue
			}
			n, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				bad++
				continue
			}
			imp.avgWaitMicros, imp.hasAvgWt = n, true
		}
	}
	return imp, bad
}

// lustreImportStates are the names ptlrpc_import_state_name prints.
func lustreImportStates() [11]string {
	return [...]string{"CLOSED", "NEW", "DISCONN", "CONNECTING", "REPLAY", "REPLAY_LOCKS",
		"REPLAY_WAIT", "RECOVER", "FULL", "EVICTED", "IDLE"}
}

func isLustreStateName(s string) bool {
	for _, n := range lustreImportStates() {
		if s == n {
			return true
		}
	}
	return false
}

// lustreStateEntry is one line of an import's state history.
type lustreStateEntry struct {
	time  int64
	state string
}

// parseLustreState reads a state file: the current state and the history,
// oldest first, of the last 16 state changes (IMP_STATE_HIST_LEN):
//
//	current_state: FULL
//	state_history:
//	 - [ 1717171717, CONNECTING ]
//	 - [ 1717171717, FULL ]
func parseLustreState(data []byte) (current string, history []lustreStateEntry, bad int) {
	for _, line := range splitLines(data) {
		t := strings.TrimSpace(line)
		switch {
		case t == "" || t == "state_history:":
		case strings.HasPrefix(t, "current_state:"):
			v := strings.TrimSpace(strings.TrimPrefix(t, "current_state:"))
			if !isLustreStateName(v) {
				bad++
				continue
			}
			current = v
		case strings.HasPrefix(t, "- [") && strings.HasSuffix(t, "]"):
			inner := strings.TrimSuffix(strings.TrimPrefix(t, "- ["), "]")
			ts, state, ok := strings.Cut(inner, ",")
			state = strings.TrimSpace(state)
			n, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
			if !ok || err != nil || !isLustreStateName(state) {
				bad++
				continue
			}
			history = append(history, lustreStateEntry{time: n, state: state})
		default:
			bad++
		}
	}
	return current, history, bad
}

// lustreRPCHist sums one direction of an osc rpc_stats file.
type lustreRPCHist struct {
	// rpcs counts the RPCs of the pages-per-RPC histogram; pages adds
	// each bucket's lower bound (a power of two) times its count, so it
	// undercounts RPCs whose page count is not a power of two.
	rpcs, pages uint64
	// inFlight adds, over the RPCs of the RPCs-in-flight histogram, how
	// many were in flight when each was sent (itself included).
	inFlight uint64
}

// lustreRPCStats is the read and the write half of an rpc_stats file.
type lustreRPCStats struct {
	read, write lustreRPCHist
}

// parseLustreRPCStats reads an osc rpc_stats file: a header of current
// values, then histograms each introduced by a title line and rows of
// "bucket: read-rpcs pct cum | write-rpcs pct cum". Only the pages per
// RPC and RPCs in flight histograms are kept. What a newer Lustre adds is
// skipped, not counted as bad, and named in unknown so that the caller can
// log it: a header value ("DIO RPCs in flight: 0", 2.17) and a whole
// histogram under a title of its own ("RPC latency (us)", 2.17), like the
// offset one that is skipped on purpose.
func parseLustreRPCStats(data []byte) (st lustreRPCStats, bad int, unknown []string) {
	const (
		none = iota
		pages
		inFlight
		other
	)
	section := none
	for _, line := range splitLines(data) {
		t := strings.TrimSpace(line)
		switch {
		case t == "":
			continue
		case strings.HasPrefix(t, "snapshot_time:"), strings.HasPrefix(t, "start_time:"), strings.HasPrefix(t, "elapsed_time:"),
			strings.HasPrefix(t, "read RPCs in flight:"), strings.HasPrefix(t, "write RPCs in flight:"),
			strings.HasPrefix(t, "pending write pages:"), strings.HasPrefix(t, "pending read pages:"):
			continue
		case strings.Join(strings.Fields(t), " ") == "read write":
			continue
		case strings.HasPrefix(t, "pages per rpc"):
			section = pages
			continue
		case strings.HasPrefix(t, "rpcs in flight"):
			section = inFlight
			continue
		case strings.HasPrefix(t, "offset"):
			section = other
			continue
		}
		bucketField, rest, ok := strings.Cut(t, ":")
		bucket, err := strconv.ParseUint(bucketField, 10, 64)
		if ok && err != nil && section == none && isRPCStatsHeaderValue(bucketField, rest) {
			unknown = append(unknown, bucketField)
			continue
		}
		if !ok && isRPCStatsTitle(t) {
			title := strings.TrimSpace(t[:strings.Index(t, "  ")])
			unknown = append(unknown, title)
			section = other
			continue
		}
		if !ok || err != nil {
			bad++
			continue
		}
		readPart, writePart, ok := strings.Cut(rest, "|")
		rf, wf := strings.Fields(readPart), strings.Fields(writePart)
		if !ok || len(rf) != 3 || len(wf) != 3 {
			bad++
			continue
		}
		r, err1 := strconv.ParseUint(rf[0], 10, 64)
		w, err2 := strconv.ParseUint(wf[0], 10, 64)
		if err1 != nil || err2 != nil {
			bad++
			continue
		}
		switch section {
		case pages:
			st.read.rpcs += r
			st.read.pages += r * bucket
			st.write.rpcs += w
			st.write.pages += w * bucket
		case inFlight:
			st.read.inFlight += r * bucket
			st.write.inFlight += w * bucket
		case none:
			// A row before any histogram title.
			bad++
		}
	}
	return st, bad, unknown
}

// isRPCStatsHeaderValue reports whether name and value are a current
// value of rpc_stats' header that this parser does not know: words, then
// a count (osc_rpc_stats_seq_show prints each with "%s: %d").
func isRPCStatsHeaderValue(name, value string) bool {
	if name == "" || strings.ContainsAny(name, "|") || !unicode.IsLetter(rune(name[0])) {
		return false
	}
	_, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	return err == nil
}

// isRPCStatsTitle reports whether t is the title line of a histogram:
// its name, then the columns of both halves, "rpcs % cum % | rpcs % cum %"
// (or "count" for the latency one).
func isRPCStatsTitle(t string) bool {
	left, right, ok := strings.Cut(t, "|")
	if !ok || !strings.Contains(t, "  ") || !unicode.IsLetter(rune(t[0])) {
		return false
	}
	l, r := strings.Fields(left), strings.Fields(right)
	if len(l) < 5 || len(r) != 4 {
		return false
	}
	cols := l[len(l)-4:]
	return strings.Join(cols, " ") == strings.Join(r, " ") && r[1] == "%" && r[2] == "cum" && r[3] == "%"
}

// lustreCounter is one line of a Lustre stats file.
type lustreCounter struct {
	count uint64
	// sum is the sum of the samples, for counters that have one (bytes,
	// latencies); hasSum is false for plain event counts.
	sum    uint64
	hasSum bool
}

// parseLustreStats reads a stats file as lprocfs_stats_seq_show prints it:
//
//	snapshot_time             1717171717.123456789 secs.nsecs
//	read_bytes                4253 samples [bytes] 4096 1048576 3963420672
//	open                      912 samples [usecs] 3 412 27913
//
// that is the counter's name, its count, "samples", the unit and, for the
// counters that keep them, min, max, sum and (sometimes) the sum of
// squares. Counters whose count is zero are not printed at all.
//
// The servers' obdfilter stats and mdt md_stats print the same lines, and
// parseLustreServerStats reads them, bad lines named; the client counts
// its bad lines only.
func parseLustreStats(data []byte) (counters map[string]lustreCounter, bad int) {
	counters, b := parseLustreServerStats(data)
	return counters, b.count
}

// parseLustreUint reads a single-value parameter file such as active,
// cur_grant_bytes or cur_dirty_bytes.
func parseLustreUint(data []byte) (uint64, bool) {
	n, err := strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
	return n, err == nil
}

// splitLines splits data into lines without copying it more than once.
func splitLines(data []byte) []string {
	s := strings.TrimRight(string(data), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// lustreLctlHeader is the line `lctl get_param` without -n prints before a
// multi-line value (and before a short one, on the same line): the
// parameter's name and '='. Only the names the collector asks for are
// taken as headers, so no line of a value can be mistaken for one.
var lustreLctlHeader = regexp.MustCompile(`^((?:osc|mdc|llite)\.[^\s=]+\.(?:rpc_stats|stats|import|state))=(.*)$`)

// parseLctlGetParam splits the output of `lctl get_param PATTERN...` into
// each parameter's value; lines before the first name are bad.
func parseLctlGetParam(data []byte) (params map[string][]byte, bad int) {
	params = map[string][]byte{}
	var name string
	var value []byte
	flush := func() {
		if name != "" {
			params[name] = value
		}
	}
	for _, line := range splitLines(data) {
		if m := lustreLctlHeader.FindStringSubmatch(line); m != nil {
			flush()
			name, value = m[1], nil
			if m[2] != "" {
				value = append(value, m[2]+"\n"...)
			}
			continue
		}
		if name == "" {
			if strings.TrimSpace(line) != "" {
				bad++
			}
			continue
		}
		value = append(value, line+"\n"...)
	}
	flush()
	return params, bad
}
