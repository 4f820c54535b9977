package collector

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The parsers below read two IBM Storage Scale (GPFS) output formats.
//
// mmpmon -p ("parseable") prints one response per line: a tag naming the
// request (_fs_io_s_, _nsd_ds_, or _failed_ when the request was rejected),
// then "_key_ value" pairs. IBM documents the keys of fs_io_s in "Display I/O
// statistics per mounted file system" (Storage Scale 5.x/6.x docs, mmpmon
// fs_io_s response table) and the _failed_ response in "Example of mmpmon
// nlist s request". nsd_ds (NSD server statistics) is not in IBM's tables;
// its response is an _nsd_ds_ line naming the disk (_dev_, _d_), followed by
// one "_r_" and one "_w_" line with _ops_, _b_ (bytes), _tw_ (total wait
// seconds) and _qt_ (total queue seconds), as printed by Storage Scale 4.x
// and later. Keys are looked up by name, never by position, because IBM adds
// keys between releases.
//
// The -Y format of mmgetstate, mmhealth and the other mm commands is
// colon-separated. "cmd:section:HEADER:version:reserved:reserved:name1:..."
// names the columns of the rows "cmd:section:0:1:::value1:..." that follow;
// values containing a colon (or other reserved characters) are
// percent-encoded, as mmclidecode documents.

// The fs_io_s counters that are exported, as indexes into mmpmonFS.counters.
const (
	fsReadBytes = iota
	fsWriteBytes
	fsReads
	fsWrites
	fsOpens
	fsCloses
	fsReaddirs
	fsInodeUpdates
	fsCounterCount
)

// fsCounterIndex maps an fs_io_s key to its counter index, or -1.
func fsCounterIndex(key string) int {
	switch key {
	case "_br_": // bytes read, from disk and cache
		return fsReadBytes
	case "_bw_": // bytes written, to disk and cache
		return fsWriteBytes
	case "_rdc_": // read() calls
		return fsReads
	case "_wc_": // write() calls
		return fsWrites
	case "_oc_": // open() and creat() calls
		return fsOpens
	case "_cc_": // close() calls
		return fsCloses
	case "_dir_": // readdir() calls
		return fsReaddirs
	case "_iu_": // inode updates to disk
		return fsInodeUpdates
	}
	return -1
}

// mmpmonFS is one fs_io_s response: the counters of one mounted file system.
type mmpmonFS struct {
	cluster, filesystem string
	counters            [fsCounterCount]uint64
	// present tells which counters the response had; a release without a
	// key must not export a false zero.
	present [fsCounterCount]bool
}

// mmpmonNSDIO is the read or write half of an nsd_ds response.
type mmpmonNSDIO struct {
	present      bool
	ops, bytes   uint64
	waitSeconds  float64
	queueSeconds float64
}

// mmpmonNSD is one nsd_ds response: the I/O an NSD server did for one disk.
type mmpmonNSD struct {
	nsd, device string
	read, write mmpmonNSDIO
}

// mmpmonRCError is a response whose _rc_ was not zero: mmpmon answered, but
// the request failed (for example rc 668, quorum lost).
type mmpmonRCError struct {
	Request string
	RC      int
}

func (e *mmpmonRCError) Error() string {
	return fmt.Sprintf("mmpmon %s returned _rc_ %d", e.Request, e.RC)
}

// mmpmonResult is everything parsed from one mmpmon run.
type mmpmonResult struct {
	fs  []mmpmonFS
	nsd []mmpmonNSD
	// rc is the highest return code seen per request tag, including 0.
	rc map[string]int
}

// mmpmonPair is one "_key_ value" pair. A value may span several blank
// separated words (rhist requests echo "_req_ nr 512;1024 ="), so it runs to
// the next key.
type mmpmonPair struct{ key, value string }

// isMmpmonKey reports whether word has the _name_ form of an mmpmon key.
func isMmpmonKey(word string) bool {
	return len(word) >= 3 && word[0] == '_' && word[len(word)-1] == '_'
}

// splitMmpmonLine returns the response tag (without its underscores and any
// "mmpmon::" prefix that the socket interface adds) and the key/value pairs.
func splitMmpmonLine(line string, pairs []mmpmonPair) (string, []mmpmonPair) {
	words := strings.Fields(line)
	if len(words) == 0 || !isMmpmonKey(words[0]) {
		return "", pairs
	}
	tag := strings.TrimPrefix(words[0][1:len(words[0])-1], "mmpmon::")
	for i := 1; i < len(words); {
		if !isMmpmonKey(words[i]) {
			// A value without a key; mmpmon never prints one, skip it.
			i++
			continue
		}
		key := words[i]
		j := i + 1
		for j < len(words) && !isMmpmonKey(words[j]) {
			j++
		}
		pairs = append(pairs, mmpmonPair{key: key, value: strings.Join(words[i+1:j], " ")})
		i = j
	}
	return tag, pairs
}

func lookupPair(pairs []mmpmonPair, key string) (string, bool) {
	for _, p := range pairs {
		if p.key == key {
			return p.value, true
		}
	}
	return "", false
}

// parseMmpmon parses the output of "mmpmon -p -s" answering fs_io_s and
// nsd_ds requests. A response it cannot use (no _rc_, a counter that is not
// a number) and a line that is not a response are skipped and returned in
// bad. The error tells of a response with a non-zero _rc_ (an
// *mmpmonRCError), of output that could not be read, or of output with no
// response at all.
func parseMmpmon(out []byte) (mmpmonResult, badLines, error) {
	res := mmpmonResult{rc: map[string]int{}}
	var bad badLines
	var errs []error
	var pairs []mmpmonPair
	// lastNSD is the index in res.nsd that _r_ and _w_ lines belong to, or
	// -1 when the previous response was not a usable nsd_ds.
	lastNSD := -1

	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), maxCommandOutput)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := sc.Text()
		var tag string
		tag, pairs = splitMmpmonLine(line, pairs[:0])
		switch tag {
		case "":
			if strings.TrimSpace(line) != "" {
				bad.add(lineNo, "not an mmpmon response", line)
			}
			continue
		case "r", "w":
			if lastNSD < 0 {
				// Belongs to an nsd_ds response that failed or was
				// malformed; that was already counted.
				continue
			}
			io, err := parseNSDIO(pairs)
			if err != nil {
				bad.add(lineNo, fmt.Sprintf("%s: %v", tag, err), line)
				continue
			}
			if tag == "r" {
				res.nsd[lastNSD].read = io
			} else {
				res.nsd[lastNSD].write = io
			}
			continue
		case "end", "response":
			continue
		}
		lastNSD = -1

		rcText, ok := lookupPair(pairs, "_rc_")
		if !ok {
			bad.add(lineNo, tag+": no _rc_", line)
			continue
		}
		rc, err := strconv.Atoi(rcText)
		if err != nil {
			bad.add(lineNo, fmt.Sprintf("%s: _rc_ %q is not a number", tag, rcText), line)
			continue
		}
		if prev, seen := res.rc[tag]; !seen || rc > prev {
			res.rc[tag] = rc
		}
		if rc != 0 {
			errs = append(errs, &mmpmonRCError{Request: tag, RC: rc})
			continue
		}

		switch tag {
		case "fs_io_s":
			fs, err := parseFSIO(pairs)
			if err != nil {
				bad.add(lineNo, fmt.Sprintf("fs_io_s: %v", err), line)
				continue
			}
			res.fs = append(res.fs, fs)
		case "nsd_ds":
			nsd, ok := lookupPair(pairs, "_d_")
			if !ok || nsd == "" {
				bad.add(lineNo, "nsd_ds: no _d_ (disk name)", line)
				continue
			}
			dev, _ := lookupPair(pairs, "_dev_")
			res.nsd = append(res.nsd, mmpmonNSD{nsd: nsd, device: dev})
			lastNSD = len(res.nsd) - 1
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("reading mmpmon output: %w", err))
	}
	if len(res.rc) == 0 && len(errs) == 0 {
		// Nothing readable: exporting no counters would look like a node
		// without file systems.
		errs = append(errs, fmt.Errorf("mmpmon printed no readable response (%d lines skipped)", bad.count))
	}
	return res, bad, errors.Join(errs...)
}

func parseFSIO(pairs []mmpmonPair) (mmpmonFS, error) {
	var fs mmpmonFS
	var ok bool
	if fs.cluster, ok = lookupPair(pairs, "_cl_"); !ok {
		return fs, errors.New("no _cl_ (cluster)")
	}
	if fs.filesystem, ok = lookupPair(pairs, "_fs_"); !ok || fs.filesystem == "" {
		return fs, errors.New("no _fs_ (file system)")
	}
	for _, p := range pairs {
		i := fsCounterIndex(p.key)
		if i < 0 {
			continue
		}
		v, err := strconv.ParseUint(p.value, 10, 64)
		if err != nil {
			return fs, fmt.Errorf("file system %s: %s %q: %w", fs.filesystem, p.key, p.value, err)
		}
		fs.counters[i] = v
		fs.present[i] = true
	}
	return fs, nil
}

func parseNSDIO(pairs []mmpmonPair) (mmpmonNSDIO, error) {
	io := mmpmonNSDIO{present: true}
	for _, p := range pairs {
		var err error
		switch p.key {
		case "_ops_":
			io.ops, err = strconv.ParseUint(p.value, 10, 64)
		case "_b_":
			io.bytes, err = strconv.ParseUint(p.value, 10, 64)
		case "_tw_":
			io.waitSeconds, err = parseSeconds(p.value)
		case "_qt_":
			io.queueSeconds, err = parseSeconds(p.value)
		}
		if err != nil {
			return io, fmt.Errorf("%s %q: %w", p.key, p.value, err)
		}
	}
	return io, nil
}

// parseSeconds parses a non-negative decimal number of seconds; NaN and
// infinities are rejected because they would poison a counter.
func parseSeconds(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if v < 0 || math.IsNaN(v) || v > 1e300 {
		return 0, fmt.Errorf("out of range")
	}
	return v, nil
}

// yTable is one "command:section" table of -Y output.
type yTable struct {
	command, section string
	// header is the split HEADER line; header[i] names column i of rows.
	header []string
	rows   [][]string
	// lines are the line numbers of rows in the output, for bad rows.
	lines []int
}

// column returns the index of the named column, or -1.
func (t *yTable) column(name string) int {
	// The first three fields are command, section and "HEADER".
	for i := 3; i < len(t.header); i++ {
		if t.header[i] == name {
			return i
		}
	}
	return -1
}

// value returns the percent-decoded value of column col in row, or "" when
// the row is shorter than the header.
func (t *yTable) value(row []string, col int) string {
	if col < 0 || col >= len(row) {
		return ""
	}
	return percentDecode(row[col])
}

// badRow records row i of t as skipped.
func (t *yTable) badRow(bad *badLines, i int, reason string) {
	bad.add(t.lines[i], reason, strings.Join(t.rows[i], ":"))
}

// yOutput is parsed -Y output.
type yOutput struct {
	tables []*yTable
}

// table returns the table for command and section, or nil.
func (y *yOutput) table(command, section string) *yTable {
	for _, t := range y.tables {
		if t.command == command && t.section == section {
			return t
		}
	}
	return nil
}

// parseYTable parses out, the -Y output of cmd (as errors name it,
// "mmlsdisk -Y"), and returns its table of command and section, nil when
// the output has none: what every reader of a one-table command starts
// with.
func parseYTable(out []byte, cmd, command, section string) (*yTable, badLines, error) {
	y, bad, err := parseY(out)
	if err != nil {
		return nil, bad, fmt.Errorf("%s: %w", cmd, err)
	}
	return y.table(command, section), bad, nil
}

// requireYTable is parseYTable for a command whose output must hold the
// table: its absence is an error naming it (the section, or the command
// when the table has none).
func requireYTable(out []byte, cmd, command, section string) (*yTable, badLines, error) {
	t, bad, err := parseYTable(out, cmd, command, section)
	if err == nil && t == nil {
		name := section
		if name == "" {
			name = command
		}
		err = fmt.Errorf("%s: no %s table", cmd, name)
	}
	return t, bad, err
}

// missingYHeader is the error of a command whose table has no HEADER in
// its output: nil when no line was skipped either (the command had
// nothing to list), else one that names what was skipped.
func missingYHeader(cmd, command, section string, bad badLines) error {
	if bad.count == 0 {
		return nil
	}
	return fmt.Errorf("%s: no %s:%s HEADER, %d lines skipped (first %s)", cmd, command, section, bad.count, bad.first)
}

// parseY parses the -Y output of an mm command. A line that is not part of
// a table (a warning printed on stdout, a truncated line) and a data row
// whose table has no HEADER yet, so that its columns cannot be named, are
// skipped and returned in bad; blank lines are not counted. The error is
// only a failure to read the output at all.
func parseY(out []byte) (*yOutput, badLines, error) {
	y := &yOutput{}
	var bad badLines
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), maxCommandOutput)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) < 4 || fields[0] == "" {
			bad.add(lineNo, "not a -Y line", line)
			continue
		}
		command, section := fields[0], fields[1]
		t := y.table(command, section)
		if fields[2] == "HEADER" {
			if t == nil {
				t = &yTable{command: command, section: section}
				y.tables = append(y.tables, t)
			}
			t.header = fields
			continue
		}
		if t == nil {
			bad.add(lineNo, fmt.Sprintf("row of %s:%s before its HEADER", command, section), line)
			continue
		}
		t.rows = append(t.rows, fields)
		t.lines = append(t.lines, lineNo)
	}
	if err := sc.Err(); err != nil {
		return y, bad, fmt.Errorf("reading -Y output: %w", err)
	}
	return y, bad, nil
}

// percentDecode undoes the %XX encoding of -Y fields (mmclidecode). A '%'
// not followed by two hex digits is kept as is, as mmclidecode does.
func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseLocaleFloat parses a number printed by an mm command. The commands
// format numbers in the node's locale, so a de_DE or fr_FR node prints
// "33,267" for 33.267 (gpfs_exporter's mmlsqos samples show both forms in
// one output). A comma is read as the decimal point only when the number
// has no '.', since the commands print no thousands separators. NaN and
// infinities are rejected: no gauge of these collectors can be either.
func parseLocaleFloat(s string) (float64, error) {
	if strings.IndexByte(s, ',') >= 0 && strings.IndexByte(s, '.') < 0 && strings.Count(s, ",") == 1 {
		s = strings.Replace(s, ",", ".", 1)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return v, nil
}

// maxGPFSDeviceName bounds a file system's device name. GPFS keeps device
// names short (they become /dev entries and mount sources); the bound only
// keeps an odd line from building a huge command line.
const maxGPFSDeviceName = 255

// validGPFSDevice reports whether name may be passed to mmlsdisk and
// mmlsqos: letters, digits, '_', '-' and '.', not starting with '-' or '.'
// (it would read as an option or a path). The packaged sudoers file allows
// exactly these names (see packaging/plateau_exporter.sudoers).
func validGPFSDevice(name string) bool {
	if name == "" || len(name) > maxGPFSDeviceName || name[0] == '-' || name[0] == '.' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return true
}
