package collector

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The daemon builds the collectors from flags; this checks the flag names
// the end-to-end test and the packaging use, and that every collector is on
// by default and reads the fixture trees the binary is pointed at.
func TestCollectorsFromFlags(t *testing.T) {
	t.Setenv("FAKE_GPFS_FIXTURES", fixturePath(t, "gpfs"))
	args := []string{
		"--path.sysfs=" + fixturePath(t, "sys"),
		"--path.procfs=" + fixturePath(t, "proc"),
		"--collector.gpfs.mmpmon-path=" + fixturePath(t, "gpfs", "mmpmon"),
		"--collector.gpfs.mmgetstate-path=" + fixturePath(t, "gpfs", "mmgetstate"),
		"--collector.gpfs.mmhealth-path=" + fixturePath(t, "gpfs", "mmhealth"),
		"--collector.gpfs.nsd",
		"--collector.gpfs.timeout=20s",
		"--collector.nvme.dev-dir=" + t.TempDir(),
		"--collector.nvme.smart-timeout=2s",
		"--collector.nfs.mountpoint-include=/home|/projects",
		"--collector.lnet.lnetctl-path=" + fixturePath(t, "lnet", "lnetctl"),
	}
	if _, err := kingpin.CommandLine.Parse(args); err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	// Its GPFS loops run every 15s with the flags' defaults; left running,
	// they would start mmpmon into a later test's FAKE_GPFS_REQUESTLOG.
	t.Cleanup(func() { r.Close() })
	if got := strings.Join(r.Enabled(), ","); got != "gpfs,infiniband,lnet,lustre,lustre_server,nfs,nvme" {
		t.Fatalf("enabled by default: %s", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	want := everyCollector("plateau_scrape_collector_success",
		"1 if the collector read its counters during this scrape, 0 if it failed. Only collectors whose subject is present on the node have this series (see plateau_scrape_collector_present).", 1)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_scrape_collector_success"); err != nil {
		t.Error(err)
	}
	for metric, n := range map[string]int{
		"plateau_gpfs_nsd_operations_total": 4, // --collector.gpfs.nsd
		"plateau_nfs_mount_info":            2, // --collector.nfs.mountpoint-include
		"plateau_infiniband_info":           3,
		"plateau_nvme_info":                 4,
		"plateau_lnet_ni_up":                2,
	} {
		if got, err := testutil.GatherAndCount(reg, metric); err != nil || got != n {
			t.Errorf("%s: %d series (err %v), want %d", metric, got, err, n)
		}
	}
}

// On a node without GPFS, InfiniBand, NVMe, NFS or Lustre, every collector
// on by default is idle: it exports plateau_scrape_collector_present 0 and
// no success series (an alert on success == 0 cannot fire), starts no
// command, and says so once at info level, not at every scrape.
func TestAbsentCollectorsAreIdle(t *testing.T) {
	empty := t.TempDir()
	proc := t.TempDir()
	// A procfs with this process but no NFS mount in its mountstats.
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "self", "mountstats"), []byte("device /dev/sda1 mounted on / with fstype ext4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	requests := filepath.Join(t.TempDir(), "requests")
	t.Setenv("FAKE_GPFS_REQUESTLOG", requests)
	args := []string{
		"--path.sysfs=" + empty,
		"--path.procfs=" + proc,
		"--collector.gpfs.mmpmon-path=" + filepath.Join(empty, "mmpmon"),
		"--collector.gpfs.mmgetstate-path=" + fixturePath(t, "gpfs", "mmgetstate"),
		"--collector.gpfs.mmhealth-path=" + fixturePath(t, "gpfs", "mmhealth"),
		"--collector.lustre.debugfs-path=" + filepath.Join(empty, "debug"),
	}
	if _, err := kingpin.CommandLine.Parse(args); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r, err := NewRegistry(log.NewLogfmtLogger(log.NewSyncWriter(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	for i := 0; i < 3; i++ {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	want := everyCollector("plateau_scrape_collector_present",
		"1 if the collector's subject (GPFS, an InfiniBand HCA, an NVMe controller, an NFS mount, Lustre) is present on this node, 0 if it is absent and the collector is idle.", 0)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_scrape_collector_present", "plateau_scrape_collector_success", "plateau_scrape_collector_duration_seconds"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 7 {
		t.Errorf("an idle registry exported %d series (err %v), want its 7 presence series alone", n, err)
	}
	// Four gathers: each collector's reason is logged once, at info.
	out := logs.String()
	for _, want := range []string{
		"gpfs: no GPFS on this node (no " + filepath.Join(empty, "mmpmon") + "); collector idle",
		"infiniband: no InfiniBand HCA on this node",
		"nvme: no NVMe controller on this node",
		"nfs: no NFS mount on this node",
		"lustre: no Lustre on this node",
		"lustre_server: no Lustre server target on this node",
		"lnet: LNet is not loaded (no " + filepath.Join(empty, "module", "lnet") + ")",
	} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("log says %q %d times, want once:\n%s", want, n, out)
		}
	}
	if strings.Contains(out, "level=warn") || strings.Contains(out, "level=error") {
		t.Errorf("absent collectors logged a warning or an error:\n%s", out)
	}
	if _, err := os.Stat(requests); err == nil {
		t.Errorf("a GPFS command ran on a node without mmpmon")
	}
}

// A present collector that keeps failing logs at warning level, once per
// failureLogEvery (and again when its error changes), at debug otherwise.
func TestFailingCollectorWarnsRateLimited(t *testing.T) {
	var logs bytes.Buffer
	r := NewRegistryFrom(log.NewLogfmtLogger(log.NewSyncWriter(&logs)), map[string]Collector{
		"broken": fakeCollector{err: errors.New("mmpmon: exit 1")},
	})
	now := time.Unix(1_700_000_000, 0)
	r.now = func() time.Time { return now }
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	for i := 0; i <= 40; i++ { // 10 minutes of 15 s scrapes, both ends
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
		now = now.Add(15 * time.Second)
	}
	if n := strings.Count(logs.String(), "level=warn"); n != 2 {
		t.Errorf("%d warnings in 41 scrapes 15 s apart, want 2 (at 0 and at 10 minutes):\n%s", n, logs.String())
	}
	want := "\n" + scrapeSuccessHelp + `
plateau_scrape_collector_success{collector="broken"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_scrape_collector_success"); err != nil {
		t.Error(err)
	}
}

// everyCollector is the exposition of the per-collector gauge name with
// help, at value for each of the six collectors a default registry runs.
func everyCollector(name, help string, value int) string {
	want := fmt.Sprintf("# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
	for _, c := range []string{"gpfs", "infiniband", "lnet", "lustre", "lustre_server", "nfs", "nvme"} {
		want += fmt.Sprintf("%s{collector=%q} %d\n", name, c, value)
	}
	return want
}
