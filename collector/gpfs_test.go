package collector

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// fakeGPFS returns a configuration running the fake commands in
// fixtures/gpfs, with mmpmon replaced by the named fake.
func fakeGPFS(t *testing.T, mmpmon string, timeout time.Duration) gpfsConfig {
	t.Helper()
	return gpfsConfig{
		mmpmonPath:     fixturePath(t, "gpfs", mmpmon),
		mmgetstatePath: fixturePath(t, "gpfs", "mmgetstate"),
		mmhealthPath:   fixturePath(t, "gpfs", "mmhealth"),
		nsd:            true,
		timeout:        timeout,
		// Long enough that a test sees only the first run unless it
		// shortens them.
		interval:      time.Hour,
		stateInterval: time.Hour,
	}
}

func newTestGPFS(t *testing.T, cfg gpfsConfig) *gpfsCollector {
	t.Helper()
	c, err := newGPFSCollector(cfg, log.NewNopLogger())
	return closedAtEnd(t, c, err)
}

func TestGPFSCollector(t *testing.T) {
	requests := filepath.Join(t.TempDir(), "requests")
	t.Setenv("FAKE_GPFS_REQUESTLOG", requests)
	c := newTestGPFS(t, fakeGPFS(t, "mmpmon", 30*time.Second))

	file := filepath.Join("fixtures", "expected", "gpfs.prom")
	compareWithFile(t, newTestRegistry("gpfs", c, nil), file, metricNames(t, file)...)

	got, err := os.ReadFile(requests)
	if err != nil {
		t.Fatal(err)
	}
	// Exactly the two requests, and above all never "reset".
	if string(got) != "fs_io_s\nnsd_ds\n" {
		t.Errorf("requests sent to mmpmon = %q, want fs_io_s and nsd_ds", got)
	}
}

func TestGPFSWithoutNSDRequest(t *testing.T) {
	requests := filepath.Join(t.TempDir(), "requests")
	t.Setenv("FAKE_GPFS_REQUESTLOG", requests)
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.nsd = false
	reg := newTestRegistry("gpfs", newTestGPFS(t, cfg), nil)

	n, err := testutil.GatherAndCount(reg, "plateau_gpfs_nsd_operations_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("got %d NSD series on a node not configured as NSD server", n)
	}
	if got, _ := os.ReadFile(requests); string(got) != "fs_io_s\n" {
		t.Errorf("requests sent to mmpmon = %q, want only fs_io_s", got)
	}
}

// A failed mmpmon response is reported with its request and return code,
// and the responses that did succeed are still exported.
func TestGPFSReturnCodeError(t *testing.T) {
	t.Setenv("FAKE_GPFS_FIXTURES", fixturePath(t, "gpfs", "rc-error"))
	c := newTestGPFS(t, fakeGPFS(t, "mmpmon", 30*time.Second))

	_, err := collectAll(c)
	var rcErr *mmpmonRCError
	if !errors.As(err, &rcErr) {
		t.Fatalf("Update error = %v, want an *mmpmonRCError", err)
	}
	if rcErr.Request != "failed" || rcErr.RC != 668 {
		t.Errorf("got %+v, want request failed with rc 668", rcErr)
	}

	want := `
# HELP plateau_gpfs_mmpmon_return_code Highest _rc_ mmpmon returned for the request in its last run; 0 means every response succeeded.
# TYPE plateau_gpfs_mmpmon_return_code gauge
plateau_gpfs_mmpmon_return_code{request="failed"} 668
plateau_gpfs_mmpmon_return_code{request="fs_io_s"} 0
plateau_gpfs_mmpmon_return_code{request="nsd_ds"} 0
` + gpfsCommandSuccessHelp + `
plateau_gpfs_command_success{command="mmgetstate"} 1
plateau_gpfs_command_success{command="mmhealth"} 1
plateau_gpfs_command_success{command="mmpmon"} 0
# HELP plateau_gpfs_nsd_operations_total I/O requests this NSD server performed for the disk (mmpmon nsd_ds _ops_).
# TYPE plateau_gpfs_nsd_operations_total counter
plateau_gpfs_nsd_operations_total{nsd="data_nsd01",op="read"} 138448
plateau_gpfs_nsd_operations_total{nsd="data_nsd01",op="write"} 9406
plateau_gpfs_nsd_operations_total{nsd="meta_nsd01",op="read"} 90211
plateau_gpfs_nsd_operations_total{nsd="meta_nsd01",op="write"} 45102
` + scrapeSuccessHelp + `
plateau_scrape_collector_success{collector="gpfs"} 0
`
	reg := newTestRegistry("gpfs", c, nil)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"plateau_gpfs_mmpmon_return_code", "plateau_gpfs_command_success",
		"plateau_gpfs_nsd_operations_total", "plateau_scrape_collector_success",
	); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "plateau_gpfs_fs_read_bytes_total"); err != nil || n != 0 {
		t.Errorf("got %d file system series (err %v) from a failed fs_io_s", n, err)
	}
}

func TestGPFSNotInstalled(t *testing.T) {
	cfg := fakeGPFS(t, "mmpmon", time.Second)
	cfg.mmpmonPath = filepath.Join(t.TempDir(), "mmpmon")
	_, err := collectAll(newTestGPFS(t, cfg))
	if !IsNoDataError(err) {
		t.Fatalf("Update error = %v, want ErrNoData when mmpmon is absent", err)
	}
}

// Missing optional commands are skipped, not failures: older releases have
// no mmhealth.
func TestGPFSOptionalCommandsAbsent(t *testing.T) {
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.mmhealthPath = filepath.Join(t.TempDir(), "mmhealth")
	cfg.mmgetstatePath = ""
	reg := newTestRegistry("gpfs", newTestGPFS(t, cfg), nil)
	want := "\n" + gpfsCommandSuccessHelp + `
plateau_gpfs_command_success{command="mmpmon"} 1
` + scrapeSuccessHelp + `
plateau_scrape_collector_success{collector="gpfs"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"plateau_gpfs_command_success", "plateau_scrape_collector_success"); err != nil {
		t.Error(err)
	}
}

// A hung mmpmon fails the collector within its timeout, the scrape still
// answers with the daemon state, and the hung command's whole process group,
// including the child holding its stdout, is gone afterwards.
func TestGPFSHungMmpmon(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Setenv("FAKE_GPFS_PIDFILE", pidFile)
	const timeout = time.Second
	c := newTestGPFS(t, fakeGPFS(t, "mmpmon-hang", timeout))

	start := time.Now()
	ms, err := collectAll(c)
	elapsed := time.Since(start)
	pgid := readPID(t, pidFile)
	t.Cleanup(func() {
		if !processGroupGone(pgid) {
			killGroup(pgid)
		}
	})

	if !errors.Is(err, errCommandTimeout) {
		t.Fatalf("Update error = %v, want a timeout", err)
	}
	// The bound is the timeout plus the reaping grace; the margin is for
	// a loaded CI machine, not for the collector.
	if limit := timeout + abandonAfter + 3*time.Second; elapsed > limit {
		t.Errorf("Update took %s, want under %s", elapsed, limit)
	}
	var state, mmpmonOK int
	for _, m := range ms {
		desc := m.Desc().String()
		if strings.Contains(desc, `"plateau_gpfs_state"`) {
			state++
		}
		if strings.Contains(desc, `"plateau_gpfs_command_success"`) {
			mmpmonOK++
		}
	}
	if state == 0 {
		t.Error("no plateau_gpfs_state while mmpmon hung; mmgetstate should still be reported")
	}
	if mmpmonOK != 3 {
		t.Errorf("got %d command_success series, want 3", mmpmonOK)
	}
	probetest.WaitUntil(t, "the hung mmpmon's process group to disappear", 10*time.Second, func() bool {
		return processGroupGone(pgid)
	})
}

// While mmpmon hangs, scrapes answer at once from the last result instead of
// waiting on the command, and the background run starts mmpmon again only
// after the hung copy was killed: one copy at a time.
func TestGPFSHungMmpmonDoesNotHoldScrapes(t *testing.T) {
	countFile := filepath.Join(t.TempDir(), "starts")
	t.Setenv("FAKE_GPFS_COUNTFILE", countFile)
	const timeout = 2 * time.Second
	cfg := fakeGPFS(t, "mmpmon-hang", timeout)
	cfg.interval = 100 * time.Millisecond
	c := newHungGPFS(t, cfg, countFile)

	if _, err := collectAll(c); !errors.Is(err, errCommandTimeout) {
		t.Fatalf("first Update error = %v, want a timeout", err)
	}
	checkHungGPFSCommand(t, c, "mmpmon", countFile, timeout)
}

// newHungGPFS is a GPFS collector one of whose commands hangs, each run's
// process group listed in countFile; at clean-up it is closed and any
// group left is killed.
func newHungGPFS(t *testing.T, cfg gpfsConfig, countFile string) *gpfsCollector {
	t.Helper()
	c := newTestGPFS(t, cfg)
	t.Cleanup(func() {
		c.Close()
		for _, pgid := range readPIDs(t, countFile) {
			if !processGroupGone(pgid) {
				killGroup(pgid)
			}
		}
	})
	return c
}

// checkHungGPFSCommand checks what follows a first run of name that timed
// out: the loop starts it again once the hung copy is killed, scrapes
// answer at once with the last failure while the new copy hangs, and on
// Close no run's process group is left.
func checkHungGPFSCommand(t *testing.T, c *gpfsCollector, name, countFile string, timeout time.Duration) {
	t.Helper()
	probetest.WaitUntil(t, name+" to be started again after the timeout", 30*time.Second, func() bool {
		return countLines(t, countFile) >= 2
	})
	for i := 0; i < 5; i++ {
		start := time.Now()
		_, err := collectAll(c)
		if elapsed := time.Since(start); elapsed >= timeout {
			t.Errorf("a scrape took %s while %s hung; it should not wait for the command (timeout %s)", elapsed, name, timeout)
		}
		if err == nil {
			t.Errorf("a scrape succeeded while %s hangs", name)
		}
	}
	c.Close()
	pgids := readPIDs(t, countFile)
	// The loop waits for each run to return before the next starts: every
	// copy but the last was killed before the next one started.
	for i, pgid := range pgids[:len(pgids)-1] {
		if !processGroupGone(pgid) {
			t.Errorf("run %d (group %d) is still alive after a later run started", i+1, pgid)
		}
	}
	for _, pgid := range pgids {
		probetest.WaitUntil(t, "every hung "+name+"'s process group to disappear", 10*time.Second, func() bool {
			return processGroupGone(pgid)
		})
	}
}

// Scrapes export the last run of each command with when it ran and how long
// it took, and the background loop keeps the results fresh.
func TestGPFSBackgroundRefresh(t *testing.T) {
	requests := filepath.Join(t.TempDir(), "requests")
	t.Setenv("FAKE_GPFS_REQUESTLOG", requests)
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.interval = 50 * time.Millisecond
	c := newTestGPFS(t, cfg)

	lastRun := func() (mmpmon, mmhealth float64) {
		ms, err := collectAll(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if !strings.Contains(m.Desc().String(), `"plateau_gpfs_command_last_run_timestamp_seconds"`) {
				continue
			}
			switch label(t, m, "command") {
			case "mmpmon":
				mmpmon = metricValue(t, m)
			case "mmhealth":
				mmhealth = metricValue(t, m)
			}
		}
		return mmpmon, mmhealth
	}
	before := time.Now()
	pmon, health := lastRun()
	if pmon == 0 || health == 0 {
		t.Fatalf("no last-run timestamps: mmpmon %v, mmhealth %v", pmon, health)
	}
	if float64(before.Add(-time.Second).Unix()) > pmon {
		t.Errorf("mmpmon last run %v predates the collector's first scrape %v", pmon, before.Unix())
	}
	probetest.WaitUntil(t, "mmpmon to run again in the background", 30*time.Second, func() bool {
		p, _ := lastRun()
		return p > pmon
	})
	if _, h := lastRun(); h != health {
		t.Errorf("mmhealth ran again (%v then %v) although its interval is an hour", health, h)
	}
	c.Close()
	n := countLines(t, requests)
	time.Sleep(10 * cfg.interval)
	if m := countLines(t, requests); m != n {
		t.Errorf("mmpmon was asked %d more requests after Close", m-n)
	}
}

func TestNewGPFSCollectorRejectsZeroTimeout(t *testing.T) {
	if _, err := newGPFSCollector(gpfsConfig{mmpmonPath: "/x"}, log.NewNopLogger()); err == nil {
		t.Error("a zero timeout was accepted; every command would be killed at once")
	}
}

// File system names are bytes; invalid UTF-8 must neither panic nor, when
// two names clean up to the same label, produce a duplicate series that
// would fail the whole scrape.
func TestGPFSInvalidUTF8Names(t *testing.T) {
	dir := t.TempDir()
	out := "_fs_io_s_ _rc_ 0 _cl_ c1 _fs_ bad\xff _br_ 1\n" +
		"_fs_io_s_ _rc_ 0 _cl_ c1 _fs_ bad\xfe _br_ 2\n"
	if err := os.WriteFile(filepath.Join(dir, "fs_io_s.txt"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_GPFS_FIXTURES", dir)
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.nsd, cfg.mmgetstatePath, cfg.mmhealthPath = false, "", ""
	reg := newTestRegistry("gpfs", newTestGPFS(t, cfg), nil)
	want := `
# HELP plateau_gpfs_fs_read_bytes_total Bytes read by this node from the file system, from disk and cache (mmpmon fs_io_s _br_).
# TYPE plateau_gpfs_fs_read_bytes_total counter
plateau_gpfs_fs_read_bytes_total{cluster="c1",filesystem="bad` + "\uFFFD" + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_gpfs_fs_read_bytes_total"); err != nil {
		t.Error(err)
	}
}

// With a request file, mmpmon gets the requests by -i and nothing on
// stdin, so sudoers can pin the whole command line.
func TestGPFSRequestFile(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "requests.log")
	t.Setenv("FAKE_GPFS_REQUESTLOG", log)
	reqFile := filepath.Join(dir, "mmpmon-nsd.requests")
	if err := os.WriteFile(reqFile, []byte("# plateau_exporter's mmpmon requests\nfs_io_s\n  nsd_ds\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.requestsFile, cfg.sudo = reqFile, false
	c := newTestGPFS(t, cfg)
	file := filepath.Join("fixtures", "expected", "gpfs.prom")
	compareWithFile(t, newTestRegistry("gpfs", c, nil), file, metricNames(t, file)...)
	if got, _ := os.ReadFile(log); string(got) != "fs_io_s\nnsd_ds\n" {
		t.Errorf("requests mmpmon read from the file = %q", got)
	}
}

func TestGPFSRequestFileRefusesOtherRequests(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{
		{"fs_io_s\nreset\n", ":2: request \"reset\" is not one the gpfs collector reads"},
		{"once source /tmp/x\n", ":1: request \"once source /tmp/x\""},
		{"# nothing\n\n", "has no request"},
	} {
		f := filepath.Join(dir, "r")
		if err := os.WriteFile(f, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := fakeGPFS(t, "mmpmon", time.Second)
		cfg.requestsFile = f
		if _, err := newGPFSCollector(cfg, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.content, err, tc.want)
		}
	}
	cfg := fakeGPFS(t, "mmpmon", time.Second)
	cfg.requestsFile = filepath.Join(dir, "fs-only")
	if err := os.WriteFile(cfg.requestsFile, []byte("fs_io_s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := newGPFSCollector(cfg, nil); err == nil || !strings.Contains(err.Error(), "does not request nsd_ds") {
		t.Errorf("--collector.gpfs.nsd with a file lacking nsd_ds: %v", err)
	}
}

func TestGPFSSudoNeedsRequestFile(t *testing.T) {
	cfg := fakeGPFS(t, "mmpmon", time.Second)
	cfg.sudo = true
	if _, err := newGPFSCollector(cfg, nil); err == nil || !strings.Contains(err.Error(), "needs --collector.gpfs.mmpmon-requests") {
		t.Fatalf("sudo over stdin accepted: %v", err)
	}
}
