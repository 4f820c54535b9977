package collector

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/procfs/sysfs"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// newTestRegistry wraps one collector in the package's Registry, so tests
// see the same plateau_scrape_collector_success accounting as the daemon.
func newTestRegistry(name string, c Collector, logger log.Logger) *prometheus.Registry {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewRegistryFrom(logger, map[string]Collector{name: c}))
	return reg
}

// compareWithFile gathers reg and compares the named metrics with the
// exposition text in file.
func compareWithFile(t *testing.T, reg prometheus.Gatherer, file string, names ...string) {
	t.Helper()
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, bytes.NewReader(want), names...); err != nil {
		t.Fatalf("metrics differ from %s:\n%v", file, err)
	}
}

// metricNames lists the metric families in an exposition file, so that a
// golden comparison covers every family the file names and no other.
func metricNames(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names = append(names, f[2])
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s names no metric families", file)
	}
	return names
}

// collectAll runs one Update and returns the metrics it sent.
// closedAtEnd fails the test on err, the error of the constructor that
// made c, and closes c when the test ends.
func closedAtEnd[C interface{ Close() error }](t testing.TB, c C, err error) C {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gatheredSeries is one series of a gather: its family's name, its labels
// by name, its value (a gauge's, a counter's or an untyped one's) and the
// metric itself, for a histogram.
type gatheredSeries struct {
	name   string
	labels map[string]string
	value  float64
	metric *dto.Metric
}

// gatherSeries gathers g and returns every series in it, in the order of
// the gather.
func gatherSeries(t testing.TB, g prometheus.Gatherer) []gatheredSeries {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var all []gatheredSeries
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := gatheredSeries{name: mf.GetName(), labels: map[string]string{}, metric: m,
				value: m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			all = append(all, s)
		}
	}
	return all
}

// procfsClass is what prometheus/procfs's sysfs reader (read, such as
// sysfs.FS.NVMeClass) makes of the tree under root: the reference the
// collectors' own readers of the same files are checked against.
func procfsClass[T any](t *testing.T, root string, read func(sysfs.FS) (T, error)) T {
	t.Helper()
	sfs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	v, err := read(sfs)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkStringCases checks f, named name in the messages, against cases:
// each input and the output it must give.
func checkStringCases(t *testing.T, name string, f func(string) string, cases map[string]string) {
	t.Helper()
	for in, want := range cases {
		if got := f(in); got != want {
			t.Errorf("%s(%q) = %q, want %q", name, in, got, want)
		}
	}
}

// wantNoData checks what a collector built (err is its constructor's) on
// a node without its subject reports: ErrNoData, idle and not failing.
// absent says what is missing, for the message.
func wantNoData(t *testing.T, c Collector, err error, absent string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collectAll(c); !IsNoDataError(err) {
		t.Errorf("Update error = %v, want ErrNoData %s", err, absent)
	}
}

func collectAll(c Collector) ([]prometheus.Metric, error) {
	ch := make(chan prometheus.Metric)
	var ms []prometheus.Metric
	done := make(chan struct{})
	go func() {
		for m := range ch {
			ms = append(ms, m)
		}
		close(done)
	}()
	err := c.Update(ch)
	close(ch)
	<-done
	return ms, err
}

// processGroupGone reports whether no live process is left in group pgid.
// Zombies do not count: they have exited and only wait for their parent
// (init, for orphans, which may reap late in a container) to collect them.
func processGroupGone(pgid int) bool {
	if errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) {
		return true
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// proc(5): "pid (comm) state ppid pgrp ..."; comm may contain
		// blanks and parentheses, so split after its last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		if pg, _ := strconv.Atoi(f[2]); pg == pgid && f[0] != "Z" && f[0] != "X" {
			return false
		}
	}
	return true
}

// readPID reads a PID written by a fake command.
func readPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	probetest.WaitUntil(t, "the fake command to write its PID", 10*time.Second, func() bool {
		data, err := os.ReadFile(file)
		if err != nil || !bytes.HasSuffix(data, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pid > 0
	})
	return pid
}

// countLines counts the lines of file, 0 if it does not exist.
func countLines(t *testing.T, file string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

// logBuffer is a go-kit logger that keeps its lines for assertions.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) Log(keyvals ...interface{}) error {
	var b bytes.Buffer
	if err := log.NewLogfmtLogger(&b).Log(keyvals...); err != nil {
		return err
	}
	l.mu.Lock()
	l.lines = append(l.lines, strings.TrimSpace(b.String()))
	l.mu.Unlock()
	return nil
}

func (l *logBuffer) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// fixturePath returns the absolute path of a file under fixtures/, so that
// fake commands can be run from any working directory.
func fixturePath(t testing.TB, elem ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"fixtures"}, elem...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// killGroup cleans up after a failed test; pgid is a group the test's own
// fake command created.
func killGroup(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
}

// metricValue returns the value of a gauge, counter or untyped metric.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	switch {
	case pb.Gauge != nil:
		return pb.Gauge.GetValue()
	case pb.Counter != nil:
		return pb.Counter.GetValue()
	case pb.Untyped != nil:
		return pb.Untyped.GetValue()
	}
	t.Fatalf("metric %s has no simple value", m.Desc())
	return 0
}

// readPIDs reads the PIDs a fake command appended to file, one per line.
func readPIDs(t *testing.T, file string) []int {
	t.Helper()
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// label returns the value of the named label of m.
func label(t *testing.T, m prometheus.Metric, name string) string {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, l := range out.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// parseErrorCount returns what c counted for source so far, and whether
// source was ever parsed.
func parseErrorCount(c parseErrorReporter, source string) (uint64, bool) {
	for _, sc := range c.parseErrors().snapshot() {
		if sc.source == source {
			return sc.count, true
		}
	}
	return 0, false
}

// The HELP and TYPE lines of series that several tests compare, each
// written once (as lustreReconnectsHelp is), as the collector declares it.
const (
	scrapeSuccessHelp = `# HELP plateau_scrape_collector_success 1 if the collector read its counters during this scrape, 0 if it failed. Only collectors whose subject is present on the node have this series (see plateau_scrape_collector_present).
# TYPE plateau_scrape_collector_success gauge`
	gpfsCommandSuccessHelp = `# HELP plateau_gpfs_command_success 1 if the last run of the GPFS command succeeded and its output was parsed, 0 otherwise.
# TYPE plateau_gpfs_command_success gauge`
	gpfsDisksNotUpHelp = `# HELP plateau_gpfs_disks_not_up Disks of the file system whose availability is not up (mmlsdisk).
# TYPE plateau_gpfs_disks_not_up gauge`
	nfsMountInfoHelp = `# HELP plateau_nfs_mount_info NFS mount of this node with its protocol version and transport; the value is always 1.
# TYPE plateau_nfs_mount_info gauge`
)
