package collector

import (
	"bytes"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The "junk lines among good rows" property of the parsers' fuzz targets:
// lines of the fuzz input that are certainly not valid rows are inserted
// into a valid fixture; every row of the fixture must still be read, and
// the parser must count at least as many bad lines as were inserted.

// junkLines returns the lines of junk (split at '\n') that isJunk accepts:
// those no parser could take for a row. Blank lines and possible rows are
// left out, since a parser rightly skips the first uncounted and may read
// the second.
func junkLines(junk []byte, isJunk func(line string) bool) []string {
	var lines []string
	for _, l := range strings.Split(string(junk), "\n") {
		if isJunk(l) {
			lines = append(lines, l)
		}
	}
	return lines
}

// insertJunk inserts each junk line into fixture before one of its lines,
// or at its end. at lists the indexes where a line may go (nil: anywhere,
// 0 to the number of lines); which one is chosen from the line's hash, so
// that one fuzz input always gives the same file.
func insertJunk(fixture []byte, junk []string, at []int) []byte {
	lines := strings.Split(strings.TrimSuffix(string(fixture), "\n"), "\n")
	if at == nil {
		for i := 0; i <= len(lines); i++ {
			at = append(at, i)
		}
	}
	before := make([][]string, len(lines)+1)
	for i, j := range junk {
		h := fnv.New32a()
		h.Write([]byte(j))
		pos := at[(int(h.Sum32())+i)%len(at)]
		before[pos] = append(before[pos], j)
	}
	var b bytes.Buffer
	for i := 0; i <= len(lines); i++ {
		for _, j := range before[i] {
			b.WriteString(j)
			b.WriteByte('\n')
		}
		if i < len(lines) {
			b.WriteString(lines[i])
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// yJunk accepts the lines that are neither blank nor could belong to a
// table: fewer than four fields, an empty command, or a row of a table
// that the fixture has no HEADER for. HEADER lines are never junk, since
// one would make the rows of its table valid.
func yJunk(fixture []byte) func(string) bool {
	y, _, _ := parseY(fixture)
	return func(line string) bool {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			return false
		}
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] == "" {
			return true
		}
		return f[2] != "HEADER" && y.table(f[0], f[1]) == nil
	}
}

// mmpmonJunk accepts non-blank lines that do not start with a _tag_.
func mmpmonJunk(line string) bool {
	words := strings.Fields(line)
	return len(words) > 0 && !isMmpmonKey(words[0])
}

// verbsJunk accepts non-blank lines other than the status line.
func verbsJunk(line string) bool {
	line = strings.TrimSpace(line)
	return line != "" && !strings.HasPrefix(line, "VERBS RDMA status:")
}

// mountsJunk accepts non-blank lines of fewer than four fields.
func mountsJunk(line string) bool {
	n := len(strings.Fields(line))
	return n > 0 && n < 4
}

// mountstatsJunk accepts lines with a first field other than "device".
func mountstatsJunk(line string) bool {
	first, _ := nextField([]byte(line))
	return len(first) > 0 && string(first) != "device"
}

// mountstatsTopLevel returns where in a mountstats file a line is between
// blocks: before a device line that follows a blank line or a device line
// without statistics, and at the end after such a line.
func mountstatsTopLevel(fixture []byte) []int {
	lines := strings.Split(strings.TrimSuffix(string(fixture), "\n"), "\n")
	between := func(prev string) bool {
		first, _ := nextField([]byte(prev))
		return len(first) == 0 || (string(first) == "device" && !strings.Contains(prev, "statvers="))
	}
	at := []int{0}
	for i := 1; i < len(lines); i++ {
		if first, _ := nextField([]byte(lines[i])); string(first) == "device" && between(lines[i-1]) {
			at = append(at, i)
		}
	}
	if between(lines[len(lines)-1]) {
		at = append(at, len(lines))
	}
	return at
}

// checkJunk inserts the junk lines of junk into fixture and checks that
// parse reads from the result what it reads from fixture alone, and counts
// at least one bad line per inserted line.
func checkJunk(t *testing.T, fixture, junk []byte, isJunk func(string) bool, at []int, parse func([]byte) (any, badLines, error)) {
	t.Helper()
	want, wantBad, wantErr := parse(fixture)
	if wantErr != nil {
		t.Fatalf("the fixture does not parse: %v", wantErr)
	}
	lines := junkLines(junk, isJunk)
	junked := insertJunk(fixture, lines, at)
	got, bad, err := parse(junked)
	if err != nil {
		t.Fatalf("%d junk lines made the parse fail: %v\n%s", len(lines), err, junked)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%d junk lines changed what was read:\ngot  %+v\nwant %+v\n%s", len(lines), got, want, junked)
	}
	if bad.count < wantBad.count+len(lines) {
		t.Fatalf("counted %d bad lines (first %s), want at least %d for %q", bad.count, bad.first, wantBad.count+len(lines), lines)
	}
}

// readGPFSFixture reads a file of fixtures/gpfs for a fuzz target.
func readGPFSFixture(f *testing.F, name string) []byte {
	f.Helper()
	data, err := os.ReadFile(filepath.Join("fixtures", "gpfs", name))
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// yTables is what parseY read, without the line numbers that inserted
// lines shift.
func yTables(out []byte) (any, badLines, error) {
	y, bad, err := parseY(out)
	type table struct {
		command, section string
		header           []string
		rows             [][]string
	}
	var ts []table
	for _, t := range y.tables {
		ts = append(ts, table{t.command, t.section, t.header, t.rows})
	}
	return ts, bad, err
}

// The property holds for a plain case too, so that a broken helper cannot
// make every fuzz run pass.
func TestJunkAmongRows(t *testing.T) {
	fixture := []byte(waitersHeader + "mmdiag:waiters:0:1:::1:0:NSDThread:x:2.5:monitored::::::for I/O completion:::\n")
	junk := []byte("foobar\nmmdiag:waiters\nmmdiag:foobar:0:1\n\nmmdiag:waiters:0:1:::2:0:NSDThread:x:9:m:::\nx:y:HEADER:z\n")
	lines := junkLines(junk, yJunk(fixture))
	if len(lines) != 3 {
		t.Fatalf("junk lines %q, want the three that are no waiter row", lines)
	}
	out := insertJunk(fixture, lines, nil)
	if n := bytes.Count(out, []byte("\n")); n != 5 {
		t.Fatalf("%d lines after inserting, want 5:\n%s", n, out)
	}
	checkJunk(t, fixture, junk, yJunk(fixture), nil, asJunkParser(parseMmdiagWaiters))
	if at := mountstatsTopLevel(fixtureMountstats(t)); len(at) != 10 {
		t.Errorf("top-level positions of the mountstats fixture: %v, want 10", at)
	}
}

// asJunkParser is parse as checkJunk takes it, its result compared as any.
func asJunkParser[T any](parse func([]byte) (T, badLines, error)) func([]byte) (any, badLines, error) {
	return func(b []byte) (any, badLines, error) {
		v, bad, err := parse(b)
		return v, bad, err
	}
}
