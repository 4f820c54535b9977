package collector

import (
	"strings"
	"testing"

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
	if got := strings.Join(r.Enabled(), ","); got != "gpfs,infiniband,nfs,nvme" {
		t.Fatalf("enabled by default: %s", got)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(r)
	want := `
# HELP plateau_scrape_collector_success 1 if the collector read its counters during this scrape, 0 if it failed or found no data.
# TYPE plateau_scrape_collector_success gauge
plateau_scrape_collector_success{collector="gpfs"} 1
plateau_scrape_collector_success{collector="infiniband"} 1
plateau_scrape_collector_success{collector="nfs"} 1
plateau_scrape_collector_success{collector="nvme"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_scrape_collector_success"); err != nil {
		t.Error(err)
	}
	for metric, n := range map[string]int{
		"plateau_gpfs_nsd_operations_total": 4, // --collector.gpfs.nsd
		"plateau_nfs_mount_info":            2, // --collector.nfs.mountpoint-include
		"plateau_infiniband_info":           3,
		"plateau_nvme_info":                 4,
	} {
		if got, err := testutil.GatherAndCount(reg, metric); err != nil || got != n {
			t.Errorf("%s: %d series (err %v), want %d", metric, got, err, n)
		}
	}
}
