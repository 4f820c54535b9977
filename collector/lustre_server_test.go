package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// newTestLustreServer builds the collector on a fixture tree whose root
// holds proc/ and sys/, as the daemon's --path.procfs and --path.sysfs see
// them. top < 0 leaves job_stats off.
func newTestLustreServer(t testing.TB, root string, timeout time.Duration, top int) *lustreServerCollector {
	t.Helper()
	c, err := newLustreServerCollector(lustreServerConfig{
		procRoot:    filepath.Join(root, "proc", "fs", "lustre"),
		sysRoot:     filepath.Join(root, "sys", "fs", "lustre"),
		interval:    time.Hour,
		timeout:     timeout,
		jobStats:    top >= 0,
		jobStatsTop: max(top, 0),
	}, nil)
	return closedAtEnd(t, c, err)
}

// TestLustreServerLayouts reads an OSS of 4 OSTs and an MDS of one MDT in
// the 2.15 layout (the golden tree: target kobjects in sysfs, the
// statistics in procfs) and in the 2.10 one (everything in procfs), with
// job_stats capped at 5 jobs per target.
func TestLustreServerLayouts(t *testing.T) {
	for _, tc := range []struct{ version, root string }{
		{"2.10", fixturePath(t, "lustre_server", "2.10")},
		{"2.15", fixturePath(t)},
	} {
		t.Run(tc.version, func(t *testing.T) {
			c := newTestLustreServer(t, tc.root, 5*time.Second, 5)
			file := fixturePath(t, "expected", "lustre_server-"+tc.version+".prom")
			compareWithFile(t, newTestRegistry("lustre_server", c, nil), file, metricNames(t, file)...)
			for _, src := range []string{"stats", "md_stats", "job_stats", "recovery_status"} {
				// The 2.10 tree has no recovery_status files to record.
				if n, ok := parseErrorCount(c, src); (!ok && src != "recovery_status") || n != 0 {
					t.Errorf("%s: %d bad lines (recorded %v) in a real layout", src, n, ok)
				}
			}
		})
	}
}

func TestLustreServerNoTree(t *testing.T) {
	c := newTestLustreServer(t, t.TempDir(), time.Second, -1)
	if _, err := collectAll(c); !IsNoDataError(err) {
		t.Fatalf("no Lustre server tree: err %v, want ErrNoData", err)
	}
}

// TestLustreServerSeriesCounts holds the cardinality docs/lustre.md states:
// 14 series per OST and 16 per MDT without job_stats, and 1 + 3(N+1) more
// per target with them, whatever the number of jobs.
func TestLustreServerSeriesCounts(t *testing.T) {
	count := func(t *testing.T, top int) map[string]int {
		c := newTestLustreServer(t, fixturePath(t), 5*time.Second, top)
		per := map[string]int{}
		for _, s := range gatherSeries(t, newTestRegistry("lustre_server", c, nil)) {
			if target, ok := s.labels["lustre_target"]; ok {
				per[target]++
			}
		}
		return per
	}
	off := count(t, -1)
	for target, n := range off {
		// The counters, then recovery_status: recovering and the
		// clients, and time_remaining while RECOVERING (OST0003).
		want := 14 + 3
		if strings.HasPrefix(target, "MDT") {
			want = 16 + 3
		}
		if target == "OST0003" {
			want++
		}
		if n != want {
			t.Errorf("job_stats off: %s has %d series, want %d", target, n, want)
		}
	}
	if len(off) != 5 {
		t.Errorf("%d targets, want 4 OSTs and 1 MDT: %v", len(off), off)
	}
	on := count(t, 20)
	// OST0003 lists 9 jobs, fewer than the cap: 9 jobs and the empty rest.
	jobs := map[string]int{"OST0000": 20, "OST0001": 20, "OST0002": 20, "OST0003": 9, "MDT0000": 20}
	for target, n := range on {
		if want := off[target] + 1 + 3*(jobs[target]+1); n != want {
			t.Errorf("job_stats top 20: %s has %d series, want %d", target, n, want)
		}
	}
	t.Logf("series per target, job_stats off: %v; top 20: %v", off, on)
}

// readJobFixture reads a job_stats fixture of the 2.15 tree.
func readJobFixture(t testing.TB, kind, target string) []byte {
	t.Helper()
	data, err := os.ReadFile(fixturePath(t, "proc", "fs", "lustre", kind, target, "job_stats"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLustreJobStatsCap: the heap keeps exactly the top N of a full sort,
// the rest adds up the others, and the totals are those of every job.
func TestLustreJobStatsCap(t *testing.T) {
	for _, file := range [][2]string{{"obdfilter", "scratch-OST0000"}, {"mdt", "scratch-MDT0000"}} {
		data := readJobFixture(t, file[0], file[1])
		all, bad, err := parseLustreJobStats(bytes.NewReader(data), 1<<20)
		if err != nil || bad.count != 0 {
			t.Fatalf("%s: %v, %d bad lines (%s)", file[1], err, bad.count, bad.first)
		}
		if all.jobs < 45 || len(all.top) != all.jobs || all.rest != (lustreJob{}) {
			t.Fatalf("%s uncapped: %d jobs, %d kept, rest %+v", file[1], all.jobs, len(all.top), all.rest)
		}
		var total lustreJob
		for _, j := range all.top {
			total.addUp(j)
		}
		if total.bytes() == 0 || total.ops == 0 {
			t.Fatalf("%s: the fixture moves no bytes or asks nothing: %+v", file[1], total)
		}
		sorted := append([]lustreJob(nil), all.top...)
		sort.Slice(sorted, func(a, b int) bool { return lustreJobLess(sorted[b], sorted[a]) })
		for _, n := range []int{0, 1, 5, 20, all.jobs, all.jobs + 10} {
			got, _, err := parseLustreJobStats(bytes.NewReader(data), n)
			if err != nil {
				t.Fatal(err)
			}
			want := sorted[:min(n, len(sorted))]
			if len(got.top) != len(want) {
				t.Fatalf("%s top %d: kept %d jobs", file[1], n, len(got.top))
			}
			for i := range want {
				if got.top[i] != want[i] {
					t.Fatalf("%s top %d: job %d is %+v, want %+v", file[1], n, i, got.top[i], want[i])
				}
			}
			sum := got.rest
			for _, j := range got.top {
				sum.addUp(j)
			}
			sum.id = ""
			if sum != total || got.jobs != all.jobs {
				t.Errorf("%s top %d: totals %+v over %d jobs, want %+v over %d", file[1], n, sum, got.jobs, total, all.jobs)
			}
		}
	}
}

// TestLustreServerJobSeries exports the cap through the collector: top N,
// one _other series, totals conserved; a real job named _other is added up
// with the others instead of colliding with them.
func TestLustreServerJobSeries(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "proc", "fs", "lustre", "obdfilter", "scratch-OST0000")
	data := readJobFixture(t, "obdfilter", "scratch-OST0000")
	all, _, _ := parseLustreJobStats(bytes.NewReader(data), 1<<20)
	// Rename the heaviest job _other (top is sorted, heaviest first).
	heaviest := all.top[0]
	data = bytes.Replace(data, []byte("job_id:          "+heaviest.id+"\n"), []byte("job_id:          "+lustreOtherJobs+"\n"), 1)
	benchWrite(t, filepath.Join(dir, "job_stats"), strings.TrimSuffix(string(data), "\n"))
	c := newTestLustreServer(t, root, 5*time.Second, 10)
	reg := newTestRegistry("lustre_server", c, nil)
	var readSum, writeSum float64
	ids := map[string]bool{}
	for _, s := range gatherSeries(t, reg) {
		switch s.name {
		case "plateau_lustre_server_job_read_bytes_total":
			readSum += s.value
			ids[s.labels["job_id"]] = true
		case "plateau_lustre_server_job_write_bytes_total":
			writeSum += s.value
		}
	}
	var want lustreJob
	for _, j := range all.top {
		want.addUp(j)
	}
	if readSum != float64(want.readBytes) || writeSum != float64(want.writeBytes) {
		t.Errorf("exported %v read, %v written bytes, want %d and %d", readSum, writeSum, want.readBytes, want.writeBytes)
	}
	// The heaviest job, renamed, went to _other: 9 named jobs and _other.
	if len(ids) != 10 || !ids[lustreOtherJobs] || ids[heaviest.id] {
		t.Errorf("job_id values %v, want 9 jobs and %s", ids, lustreOtherJobs)
	}
	if n, err := testutil.GatherAndCount(reg, "plateau_lustre_server_jobs"); err != nil || n != 1 {
		t.Errorf("%d plateau_lustre_server_jobs series (err %v)", n, err)
	}
}

// TestLustreServerJobStatsOff: without the flag, job_stats is not even
// opened.
func TestLustreServerJobStatsOff(t *testing.T) {
	c := newTestLustreServer(t, fixturePath(t), 5*time.Second, -1)
	reg := newTestRegistry("lustre_server", c, nil)
	for _, name := range []string{"plateau_lustre_server_jobs", "plateau_lustre_server_job_read_bytes_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
			t.Errorf("%s: %d series (err %v), want none", name, n, err)
		}
	}
	if _, ok := parseErrorCount(c, "job_stats"); ok {
		t.Error("job_stats was parsed with job_stats off")
	}
}

// TestLustreServerBadLines: a garbled line costs itself and is counted.
func TestLustreServerBadLines(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "proc", "fs", "lustre", "obdfilter", "scratch-OST0000")
	stats, err := os.ReadFile(fixturePath(t, "proc", "fs", "lustre", "obdfilter", "scratch-OST0000", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	garbled := strings.Replace(string(stats), "write_bytes               884211 samples", "write_bytes               88x211 samples", 1)
	benchWrite(t, filepath.Join(dir, "stats"), "# a release's new banner\n"+strings.TrimSuffix(garbled, "\n"))
	benchWrite(t, filepath.Join(dir, "job_stats"), "job_stats:\n- job_id: 17\n  read_bytes: { samples: x, unit: bytes }\n  write_bytes: { samples: 2, unit: bytes, min: 1, max: 1, sum: 2 }")
	c := newTestLustreServer(t, root, 5*time.Second, 5)
	reg := newTestRegistry("lustre_server", c, nil)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP plateau_lustre_server_read_bytes_total Bytes this OST sent to clients (obdfilter stats read_bytes sum).
# TYPE plateau_lustre_server_read_bytes_total counter
plateau_lustre_server_read_bytes_total{filesystem="scratch",lustre_target="OST0000"} 1.764397809664e+12
# HELP plateau_lustre_server_reads_total Bulk read requests this OST served (obdfilter stats read_bytes samples).
# TYPE plateau_lustre_server_reads_total counter
plateau_lustre_server_reads_total{filesystem="scratch",lustre_target="OST0000"} 1.923041e+06
# HELP plateau_lustre_server_writes_total Bulk write requests this OST served (obdfilter stats write_bytes samples).
# TYPE plateau_lustre_server_writes_total counter
plateau_lustre_server_writes_total{filesystem="scratch",lustre_target="OST0000"} 0
`), "plateau_lustre_server_read_bytes_total", "plateau_lustre_server_reads_total", "plateau_lustre_server_writes_total"); err != nil {
		t.Error(err)
	}
	for src, want := range map[string]uint64{"stats": 2, "job_stats": 1} {
		if n, _ := parseErrorCount(c, src); n != want {
			t.Errorf("%s: %d bad lines counted, want %d", src, n, want)
		}
	}
}

// genLustreServer writes an OSS of osts OSTs, each with the 2.15 fixture's
// OST0000 stats and job_stats, under root; it returns the target
// directories.
func genLustreServer(t testing.TB, root string, osts int) []string {
	t.Helper()
	fix := fixturePath(t, "proc", "fs", "lustre", "obdfilter", "scratch-OST0000")
	var dirs []string
	for i := 0; i < osts; i++ {
		dir := filepath.Join(root, "proc", "fs", "lustre", "obdfilter", fmt.Sprintf("scratch-OST%04x", i))
		for _, f := range []string{"stats", "job_stats"} {
			data, err := os.ReadFile(filepath.Join(fix, f))
			if err != nil {
				t.Fatal(err)
			}
			benchWrite(t, filepath.Join(dir, f), strings.TrimSuffix(string(data), "\n"))
		}
		dirs = append(dirs, dir)
	}
	return dirs
}

// TestLustreServerHungRead puts a FIFO no one writes in place of one OST's
// stats: opening it blocks, as a read on a wedged server can. The scrape
// returns by the round's deadline with the other OSTs, later rounds
// neither wait for it nor read it again, and once it returns nothing is
// left running.
func TestLustreServerHungRead(t *testing.T) {
	root := t.TempDir()
	dirs := genLustreServer(t, root, 4)
	fifo := filepath.Join(dirs[2], "stats")
	release := hungFIFO(t, fifo)
	const timeout = time.Second
	c := newTestLustreServer(t, root, timeout, 5)
	reg := newTestRegistry("lustre_server", c, nil)
	stuckKey := "obdfilter/scratch-OST0002/stats"
	running := func() []string { return runningKeys(&c.reads) }

	begin := time.Now()
	if n, err := testutil.GatherAndCount(reg, "plateau_lustre_server_read_bytes_total"); err != nil || n != 3 {
		t.Fatalf("first scrape: %d read_bytes series (err %v), want the 3 OSTs that answer", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "plateau_lustre_server_jobs"); err != nil || n != 3 {
		// The hung OST's job_stats is not tried once its stats hangs.
		t.Errorf("first scrape: %d jobs series (err %v), want 3", n, err)
	}
	checkHungRead(t, hungRead{began: begin, reg: reg, timeout: timeout, fifo: fifo, stuckKey: stuckKey, release: release, running: running,
		stuckReads: func() float64 { return lustreServerStuckReads(t, c.round()) }, metric: "plateau_lustre_server_stuck_reads",
		recovered: "read_bytes                3 samples [bytes] 4096 4096 12288"})
}

func lustreServerStuckReads(t *testing.T, ms []prometheus.Metric) float64 {
	t.Helper()
	return gaugeIn(t, ms, "plateau_lustre_server_stuck_reads")
}
