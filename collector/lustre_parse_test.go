package collector

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readLustreFixture(t testing.TB, elem ...string) []byte {
	t.Helper()
	data, err := os.ReadFile(fixturePath(t, elem...))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// lustreFixtureFiles lists every fixture file called name in the three
// layouts, the seeds of the fuzz targets.
func lustreFixtureFiles(t testing.TB, name string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, root := range []string{fixturePath(t, "lustre"), fixturePath(t, "proc"), fixturePath(t, "sys")} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && d.Name() == name && strings.Contains(path, string(filepath.Separator)+"lustre"+string(filepath.Separator)) {
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				out = append(out, data)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s fixture", name)
	}
	return out
}

func TestParseLustreImport(t *testing.T) {
	imp, bad := parseLustreImport(readLustreFixture(t, "proc", "fs", "lustre", "osc", "scratch-OST0003-osc-ffff8f2a3b4c5000", "import"))
	want := lustreImport{state: "FULL", nid: "10.20.0.33@o2ib", inflight: 8, timeouts: 7, avgWaitMicros: 48912,
		hasInflight: true, hasTimeouts: true, hasAvgWt: true}
	if bad != 0 || imp != want {
		t.Fatalf("got %+v with %d bad lines, want %+v", imp, bad, want)
	}
	// A disconnected import has no connection; units other than usec and
	// unknown states are refused rather than misread.
	imp, bad = parseLustreImport([]byte("import:\n    state: DISCONN\n    connection:\n       current_connection: <none>\n" +
		"    rpcs:\n       timeouts: 4\n       avg_waittime: 12 msec\n    state: ASLEEP\n    garbage\n"))
	if bad != 3 || imp.state != "DISCONN" || imp.nid != "" || imp.timeouts != 4 || imp.hasAvgWt {
		t.Fatalf("got %+v with %d bad lines", imp, bad)
	}
}

// TestParseLustreImportVersions reads the lines that changed across
// releases as each one prints them: 2.15.7 and 2.16 print the wait unit
// as "usecs" (the counter's units now come from its type), and 2.16 quotes
// current_connection, as failover_nids always was.
func TestParseLustreImportVersions(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       lustreImport
	}{
		{"2.12 usec", "    state: FULL\n       current_connection: 10.0.0.1@tcp\n       avg_waittime: 1284 usec\n",
			lustreImport{state: "FULL", nid: "10.0.0.1@tcp", avgWaitMicros: 1284, hasAvgWt: true}},
		{"2.15.7 usecs", "    state: FULL\n       current_connection: 10.0.0.1@tcp\n       avg_waittime: 1284 usecs\n",
			lustreImport{state: "FULL", nid: "10.0.0.1@tcp", avgWaitMicros: 1284, hasAvgWt: true}},
		{"2.16 quoted", "    state: FULL\n       current_connection: \"10.0.0.1@tcp\"\n       avg_waittime: 1284 usecs\n",
			lustreImport{state: "FULL", nid: "10.0.0.1@tcp", avgWaitMicros: 1284, hasAvgWt: true}},
		{"2.16 none", "    state: IDLE\n       current_connection: \"<none>\"\n",
			lustreImport{state: "IDLE"}},
	} {
		imp, bad := parseLustreImport([]byte(tc.text))
		if bad != 0 || imp != tc.want {
			t.Errorf("%s: got %+v with %d bad lines, want %+v", tc.name, imp, bad, tc.want)
		}
	}
	// Half a quote is not a NID.
	if imp, bad := parseLustreImport([]byte("current_connection: \"10.0.0.1@tcp\n")); bad != 1 || imp.nid != "" {
		t.Errorf("half-quoted NID: got %+v with %d bad lines", imp, bad)
	}
}

func TestParseLustreState(t *testing.T) {
	cur, hist, bad := parseLustreState(readLustreFixture(t, "lustre", "2.12", "proc", "fs", "lustre", "osc", "scratch-OST0001-osc-ffff9c0e7a3e1000", "state"))
	if bad != 0 || cur != "IDLE" || len(hist) != 8 || hist[7] != (lustreStateEntry{1716321761, "IDLE"}) {
		t.Fatalf("current %q, history %v, %d bad lines", cur, hist, bad)
	}
	_, hist, bad = parseLustreState([]byte("current_state: FULL\nstate_history:\n - [ 12, FULL ]\n - [ x, FULL ]\n - [ 13, SLEEPING ]\n - [ 14 FULL ]\n"))
	if bad != 3 || len(hist) != 1 {
		t.Fatalf("history %v, %d bad lines; want 1 entry and 3 bad lines", hist, bad)
	}
}

func TestParseLustreRPCStats(t *testing.T) {
	st, bad, _ := parseLustreRPCStats(readLustreFixture(t, "proc", "fs", "lustre", "osc", "scratch-OST0003-osc-ffff8f2a3b4c5000", "rpc_stats"))
	// Fixture OST0003: read pages 600×1 + 40×2 + 25×4 + 15×8 + 10×16 + 5×32 + 10×64 + 45×128 + 20305×256.
	want := lustreRPCStats{
		read:  lustreRPCHist{rpcs: 21055, pages: 600 + 80 + 100 + 120 + 160 + 160 + 640 + 5760 + 20305*256, inFlight: 16005 + 2*3510 + 3*1005 + 4*485},
		write: lustreRPCHist{rpcs: 14485, pages: 1550 + 220 + 180 + 560 + 480 + 640 + 960 + 7040 + 12590*256, inFlight: 5200 + 2*3055 + 3*2400 + 4*1955 + 5*1075 + 6*510 + 7*195 + 8*45},
	}
	if bad != 0 || st != want {
		t.Fatalf("got %+v with %d bad lines, want %+v", st, bad, want)
	}
}

// TestParseLustreRPCStatsNewSections reads an rpc_stats laid out as
// osc_rpc_stats_seq_show prints it from 2.17 (v2_16_55 on master): a
// "DIO RPCs in flight" value in the header and an "RPC latency (us)"
// histogram after the offset one. Both are valid output: skipped and
// named, never counted as bad, and the latency rows do not leak into the
// histograms that are read.
func TestParseLustreRPCStatsNewSections(t *testing.T) {
	text := "snapshot_time:         1733212800.123456789 secs.nsecs\n" +
		"start_time:            1733200000.000000000 secs.nsecs\n" +
		"elapsed_time:          12800.123456789 secs.nsecs\n" +
		"read RPCs in flight:  0\nwrite RPCs in flight: 1\nDIO RPCs in flight: 2\n" +
		"pending write pages:  0\npending read pages:   0\n" +
		"\n\t\t\tread\t\t\twrite\npages per rpc         rpcs   % cum % |       rpcs   % cum %\n" +
		"1:\t\t        10  50  50   |          4  40  40\n" +
		"256:\t\t        10  50 100   |          6  60 100\n" +
		"\n\t\t\tread\t\t\twrite\nrpcs in flight        rpcs   % cum % |       rpcs   % cum %\n" +
		"1:\t\t        20 100 100   |          8  80  80\n" +
		"2:\t\t         0   0 100   |          2  20 100\n" +
		"\n\t\t\tread\t\t\twrite\noffset                rpcs   % cum % |       rpcs   % cum %\n" +
		"0:\t\t        20 100 100   |         10 100 100\n" +
		"\n\t\t\tread\t\t\twrite\nRPC latency (us)       count   % cum % |       count   % cum %\n" +
		"0:\t\t         0   0   0   |          0   0   0\n" +
		"512:\t\t        20 100 100   |         10 100 100\n"
	st, bad, unknown := parseLustreRPCStats([]byte(text))
	want := lustreRPCStats{
		read:  lustreRPCHist{rpcs: 20, pages: 10 + 10*256, inFlight: 20},
		write: lustreRPCHist{rpcs: 10, pages: 4 + 6*256, inFlight: 8 + 2*2},
	}
	if bad != 0 || st != want {
		t.Fatalf("got %+v with %d bad lines, want %+v and none", st, bad, want)
	}
	if !reflect.DeepEqual(unknown, []string{"DIO RPCs in flight", "RPC latency (us)"}) {
		t.Fatalf("unknown sections %q", unknown)
	}
}

func TestParseLustreStats(t *testing.T) {
	for _, file := range [][]string{
		{"lustre", "2.10", "proc", "fs", "lustre", "llite", "lustre-ffff88103b6c7800", "stats"},
		{"sys", "kernel", "debug", "lustre", "llite", "home-ffff8f2a3b4c6800", "stats"},
	} {
		c, bad := parseLustreStats(readLustreFixture(t, file...))
		if bad != 0 || c["read_bytes"] != (lustreCounter{count: 4253, sum: 3963698181, hasSum: true}) || c["open"].count != 91244 {
			t.Errorf("%s: read_bytes %+v, open %+v, %d bad lines", filepath.Join(file...), c["read_bytes"], c["open"], bad)
		}
	}
}

// junkLine inserts junk, made a single line, as line number at of data.
func junkLine(data []byte, junk string, at uint) []byte {
	lines := strings.Split(string(data), "\n")
	i := int(at % uint(len(lines)+1))
	junk = strings.NewReplacer("\n", " ", "\r", " ").Replace(junk)
	lines = append(lines[:i], append([]string{junk}, lines[i:]...)...)
	return []byte(strings.Join(lines, "\n"))
}

// fuzzJunkLine checks the parsers' contract on data with one junk line
// added: the junk costs at most itself, and when it is counted as bad,
// everything read from the other lines is as without it.
func fuzzJunkLine[R any](f *testing.F, seeds [][]byte, parse func([]byte) (R, int)) {
	for i, s := range seeds {
		f.Add(s, "OST0007 is gone", uint(i*7))
		f.Add(s, "1:\t\t  12 0 0   | x 0 0", uint(i*3+1))
	}
	f.Fuzz(func(t *testing.T, data []byte, junk string, at uint) {
		before, bad0 := parse(data)
		if bad0 < 0 || bad0 > strings.Count(string(data), "\n")+1 {
			t.Fatalf("%d bad lines in %d lines", bad0, strings.Count(string(data), "\n")+1)
		}
		after, bad1 := parse(junkLine(data, junk, at))
		switch bad1 {
		case bad0: // the junk was a line the parser reads (or blank)
		case bad0 + 1:
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("a bad line changed what the others say:\nbefore %+v\nafter  %+v", before, after)
			}
		default:
			t.Fatalf("one junk line cost %d bad lines", bad1-bad0)
		}
	})
}

func FuzzParseLustreImport(f *testing.F) {
	fuzzJunkLine(f, lustreFixtureFiles(f, "import"), parseLustreImport)
}

func FuzzParseLustreState(f *testing.F) {
	type state struct {
		current string
		history []lustreStateEntry
	}
	fuzzJunkLine(f, lustreFixtureFiles(f, "state"), func(data []byte) (state, int) {
		cur, hist, bad := parseLustreState(data)
		return state{cur, hist}, bad
	})
}

func FuzzParseLustreRPCStats(f *testing.F) {
	fuzzJunkLine(f, lustreFixtureFiles(f, "rpc_stats"), func(data []byte) (lustreRPCStats, int) {
		st, bad, _ := parseLustreRPCStats(data)
		return st, bad
	})
}

func FuzzParseLustreStats(f *testing.F) {
	fuzzJunkLine(f, lustreFixtureFiles(f, "stats"), parseLustreStats)
}
