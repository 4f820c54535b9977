package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lustreServerFixtures returns the named file of every target of the
// golden tree and of each release family's server tree.
func lustreServerFixtures(t testing.TB, name string) [][]byte {
	t.Helper()
	var out [][]byte
	roots := []string{fixturePath(t, "proc", "fs", "lustre")}
	for _, v := range []string{"2.10", "2.14", "2.15.7", "2.16"} {
		roots = append(roots, fixturePath(t, "lustre_server", v, "proc", "fs", "lustre"))
	}
	for _, root := range roots {
		files, err := filepath.Glob(filepath.Join(root, "*", "*", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, data)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s fixture", name)
	}
	return out
}

// lustreServerStatsJunk accepts the lines no counter line could be: one
// to three fields, other than the time lines.
func lustreServerStatsJunk(line string) bool {
	f := strings.Fields(line)
	if len(f) == 0 || len(f) > 3 {
		return false
	}
	switch f[0] {
	case "snapshot_time", "start_time", "elapsed_time":
		return false
	}
	return true
}

// lustreJobStatsJunk accepts the non-blank lines without a colon: neither
// a job_id line nor a counter.
func lustreJobStatsJunk(line string) bool {
	t := strings.TrimSpace(line)
	return t != "" && !strings.Contains(t, ":")
}

func parseServerStatsForJunk(b []byte) (any, badLines, error) {
	c, bad := parseLustreServerStats(b)
	return c, bad, nil
}

func parseJobStatsForJunk(b []byte) (any, badLines, error) {
	return parseLustreJobStats(bytes.NewReader(b), 5)
}

func TestLustreServerParsersReadFixtures(t *testing.T) {
	for _, name := range []string{"stats", "md_stats"} {
		for _, data := range lustreServerFixtures(t, name) {
			c, bad := parseLustreServerStats(data)
			if bad.count != 0 || len(c) < 2 { // the 2.14 capture's md_stats has 2
				t.Errorf("%s: %d counters, %d bad lines (%s)", name, len(c), bad.count, bad.first)
			}
		}
	}
	for _, data := range lustreServerFixtures(t, "job_stats") {
		js, bad, err := parseLustreJobStats(bytes.NewReader(data), 5)
		if err != nil || bad.count != 0 || js.jobs < 3 {
			t.Errorf("job_stats: %d jobs, %d bad lines (%s), err %v", js.jobs, bad.count, bad.first, err)
		}
	}
	// The property holds for a plain case, so that a broken helper cannot
	// make every fuzz run pass.
	junk := []byte("foo\nread_bytes 12 samples [bytes] 1 1 12\n\nbanner line\n")
	if got := junkLines(junk, lustreServerStatsJunk); len(got) != 2 || got[0] != "foo" {
		t.Errorf("stats junk lines %q, want foo and the banner", got)
	}
	checkJunk(t, lustreServerFixtures(t, "stats")[0], junk, lustreServerStatsJunk, nil, parseServerStatsForJunk)
	checkJunk(t, lustreServerFixtures(t, "job_stats")[0], []byte("- 17\n  sum 3\nx: y\n"), lustreJobStatsJunk, nil, parseJobStatsForJunk)
}

// TestLustreJobStatsLongLine: a line longer than the parser's buffer costs
// itself, not the jobs after it.
func TestLustreJobStatsLongLine(t *testing.T) {
	in := "job_stats:\n- job_id: a\n  read_bytes: { samples: 1, unit: bytes, min: 1, max: 1, sum: 7 }\n" +
		"  " + strings.Repeat("x", 3*maxLustreLine) + "\n- job_id: b\n  write_bytes: { samples: 1, unit: bytes, min: 1, max: 1, sum: 9 }\n"
	js, bad, err := parseLustreJobStats(strings.NewReader(in), 5)
	if err != nil || bad.count != 1 || js.jobs != 2 || js.top[0].writeBytes != 9 || js.top[1].readBytes != 7 {
		t.Fatalf("%+v, %d bad lines, err %v", js, bad.count, err)
	}
}

func FuzzParseLustreServerStats(f *testing.F) {
	for _, name := range []string{"stats", "md_stats"} {
		for _, s := range lustreServerFixtures(f, name) {
			f.Add(s, []byte("banner\nread_bytes 12 samples\n"))
		}
	}
	f.Fuzz(func(t *testing.T, data, junk []byte) {
		checkJunk(t, data, junk, lustreServerStatsJunk, nil, parseServerStatsForJunk)
	})
}

func FuzzParseLustreJobStats(f *testing.F) {
	for _, s := range lustreServerFixtures(f, "job_stats") {
		// The first jobs of each file: a whole file is too large an
		// input for the fuzzer to mutate usefully.
		f.Add(firstLines(s, 60), []byte("- 4812345\n  read_bytes { samples 3 }\n"))
	}
	f.Fuzz(func(t *testing.T, data, junk []byte) {
		checkJunk(t, data, junk, lustreJobStatsJunk, nil, parseJobStatsForJunk)
	})
}

// firstLines returns the first n lines of data.
func firstLines(data []byte, n int) []byte {
	end := 0
	for i := 0; i < n && end < len(data); i++ {
		j := bytes.IndexByte(data[end:], '\n')
		if j < 0 {
			return data
		}
		end += j + 1
	}
	return data[:end]
}

// genJobStats writes a 2.15 OST job_stats of n jobs, bytes spread over
// seven orders of magnitude so that the heap keeps changing its root.
func genJobStats(n int) []byte {
	var b bytes.Buffer
	b.WriteString("job_stats:\n")
	for i := 0; i < n; i++ {
		r := uint64(i*7919%100003) * 4096
		w := uint64(i*104729%1000003) * 4096
		fmt.Fprintf(&b, "- job_id:          %d\n", 4800000+i)
		fmt.Fprintf(&b, "  snapshot_time:   1733212%03d.418372911 secs.nsecs\n", i%1000)
		b.WriteString("  start_time:      1733100000.102938475 secs.nsecs\n  elapsed_time:    112800.315434436 secs.nsecs\n")
		for _, c := range []struct {
			name, unit string
			samples    uint64
			sum        uint64
		}{
			{"read_bytes", "bytes", r / 4096, r}, {"write_bytes", "bytes", w / 4096, w},
			{"read", "usecs", r / 4096, r / 512}, {"write", "usecs", w / 4096, w / 256},
			{"getattr", "usecs", uint64(i % 40), uint64(i%40) * 31}, {"setattr", "usecs", 0, 0},
			{"punch", "usecs", uint64(i % 3), uint64(i%3) * 90}, {"sync", "usecs", 0, 0},
			{"destroy", "usecs", uint64(i % 17), uint64(i%17) * 44}, {"create", "usecs", 0, 0},
			{"statfs", "usecs", 0, 0}, {"get_info", "usecs", 0, 0}, {"set_info", "usecs", 0, 0},
			{"quotactl", "usecs", 0, 0}, {"prealloc", "usecs", uint64(i % 5), uint64(i%5) * 12},
		} {
			fmt.Fprintf(&b, "  %-15s { samples: %11d, unit: %5s, min: %8d, max: %8d, sum: %16d, sumsq: %18d }\n",
				c.name+":", c.samples, c.unit, 0, 4194304, c.sum, c.sum*64)
		}
	}
	return b.Bytes()
}

// BenchmarkParseLustreJobStats parses the job_stats of a busy OST, 20,000
// jobs (some 36 MB), keeping the top 20.
func BenchmarkParseLustreJobStats(b *testing.B) {
	data := genJobStats(20000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		js, bad, err := parseLustreJobStats(bytes.NewReader(data), 20)
		if err != nil || bad.count != 0 || js.jobs != 20000 || len(js.top) != 20 {
			b.Fatalf("%d jobs, %d kept, %d bad lines (%s), err %v", js.jobs, len(js.top), bad.count, bad.first, err)
		}
	}
}

// TestLustreJobIDAcrossVersions reads one job's id as each release prints
// it (lprocfs_jobstats_seq_show): bare up to 2.15.1; quoted, with ':'
// escaped as \x3A, from 2.15.2; quoted with ':' as is in 2.16. All three
// are the same job and must give the same job_id label.
func TestLustreJobIDAcrossVersions(t *testing.T) {
	counter := "  read_bytes:      { samples:           1, unit: bytes, min:     4096, max:     4096, sum:             4096, sumsq:           16777216 }\n"
	for _, tc := range []struct{ version, line, want string }{
		{"2.14", `- job_id:          SLURM_JOB10.0`, "SLURM_JOB10.0"},
		{"2.15.2", `- job_id:          "SLURM_JOB10\x3A0\x3Anode12"`, "SLURM_JOB10:0:node12"},
		{"2.16", `- job_id:          "SLURM_JOB10:0:node12"`, "SLURM_JOB10:0:node12"},
		{"2.16 at sign", `- job_id:          "@sbatch.1234"`, "@sbatch.1234"},
		{"2.15 space", `- job_id:          "cp\x20a.4854"`, "cp a.4854"},
	} {
		st, bad, err := parseLustreJobStats(strings.NewReader("job_stats:\n"+tc.line+"\n"+counter), 5)
		if err != nil || bad.count != 0 || len(st.top) != 1 || st.top[0].id != tc.want {
			t.Errorf("%s: got %+v, %d bad lines (%v), want job %q", tc.version, st.top, bad.count, err, tc.want)
		}
	}
	// Malformed quoting or escapes cost their line (and the job's
	// counters, which then precede any job_id of their own).
	for _, line := range []string{`- job_id: "abc`, `- job_id: abc"`, `- job_id: "a\x3"`, `- job_id: "a\y41"`, `- job_id: ""`} {
		_, bad, err := parseLustreJobStats(strings.NewReader("job_stats:\n"+line+"\n"), 5)
		if err != nil || bad.count != 1 {
			t.Errorf("%s: %d bad lines (%v), want 1", line, bad.count, err)
		}
	}
}

// TestParseLustreRecoveryStatus reads real recovery_status captures
// (fixtures: the golden tree's OSTs and MDT, and the 2.14 server's; see
// collector/fixtures/lustre/SOURCES) and the values they print.
func TestParseLustreRecoveryStatus(t *testing.T) {
	for _, tc := range []struct {
		file []string
		want lustreRecovery
	}{
		{[]string{"proc", "fs", "lustre", "obdfilter", "scratch-OST0000", "recovery_status"},
			lustreRecovery{status: "COMPLETE", connected: 8, total: 8, hasClients: true}},
		{[]string{"proc", "fs", "lustre", "obdfilter", "scratch-OST0003", "recovery_status"},
			lustreRecovery{status: "RECOVERING", connected: 3, total: 7, hasClients: true, remaining: 119, hasRemaining: true}},
		{[]string{"proc", "fs", "lustre", "mdt", "scratch-MDT0000", "recovery_status"},
			lustreRecovery{status: "COMPLETE", connected: 3, total: 7, hasClients: true}},
		{[]string{"lustre_server", "2.14", "proc", "fs", "lustre", "obdfilter", "fs-OST0000", "recovery_status"},
			lustreRecovery{status: "INACTIVE"}},
		{[]string{"lustre_server", "2.14", "proc", "fs", "lustre", "mdt", "fs-MDT0000", "recovery_status"},
			lustreRecovery{status: "COMPLETE", connected: 1, total: 1, hasClients: true}},
	} {
		got, bad := parseLustreRecoveryStatus(readLustreFixture(t, tc.file...))
		if bad.count != 0 || got != tc.want {
			t.Errorf("%s: got %+v with %d bad lines, want %+v", filepath.Join(tc.file...), got, bad.count, tc.want)
		}
	}
	// What does not read costs its line and nothing else.
	got, bad := parseLustreRecoveryStatus([]byte("status: RESTARTING\nstatus: WAITING_FOR_CLIENTS\nconnected_clients: x/7\ntime_remaining: soon\nnoise\n"))
	if bad.count != 4 || got != (lustreRecovery{status: "WAITING_FOR_CLIENTS"}) || !got.recovering() {
		t.Errorf("got %+v with %d bad lines, want WAITING_FOR_CLIENTS and 4", got, bad.count)
	}
}

func FuzzParseLustreRecoveryStatus(f *testing.F) {
	fuzzJunkLine(f, lustreServerFixtures(f, "recovery_status"), func(data []byte) (lustreRecovery, int) {
		r, bad := parseLustreRecoveryStatus(data)
		return r, bad.count
	})
}
