package store

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/iocount"
)

// The node's own I/O is exported beside the last successful run, and only
// while the probe's last run succeeded, as its throughput is.
func TestStoreExportsConcurrentIO(t *testing.T) {
	// Named as the e2e test's probe is, so that the dashboards' tests can
	// join this output with the golden /metrics' baselines.
	p := probefixture.SmallSeq("seq")
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "e2e", Probes: []*probe.ProbeConfig{&p}}}}, nil)
	const name = "plateau_probe_concurrent_bytes_per_second"
	end := time.Unix(1_700_000_000, 0)
	ok := func() *probe.Result {
		return &probe.Result{Target: "e2e", Probe: "seq", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end, Engine: "sync",
			Ops: []probe.OpResult{{Op: "write", Bytes: 1000, Operations: 10, Seconds: 2}}}
	}
	count := func() int { return testutil.CollectAndCount(s, name) }

	s.RecordConcurrent("e2e", "seq", iocount.Rate{}, false)
	s.Record(ok(), false)
	if n := count(); n != 0 {
		t.Fatalf("%d series of %s when no counters applied, want none", n, name)
	}

	s.RecordConcurrent("e2e", "seq", iocount.Rate{Read: 1.5e6, Write: 0, Source: iocount.SourceDiskstats}, true)
	s.Record(ok(), false)
	// The expected output is a file, so that the dashboards' drift test
	// knows the metric: the golden /metrics has it only on machines whose
	// temporary directory is on a block device.
	want, err := os.ReadFile("testdata/concurrent.prom")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want), "# HELP "+name+" "+helpOf(t, name)+"\n") {
		t.Fatalf("testdata/concurrent.prom has another HELP than %s's: update it", name)
	}
	compareSeries(t, s, string(want), name)

	// A failed run hides it; the rate told for a run is never carried to
	// the next one.
	s.Record(&probe.Result{Target: "e2e", Probe: "seq", Kind: probe.KindSequential, Start: end, End: end, Reason: probe.ReasonEIO}, false)
	if n := count(); n != 0 {
		t.Fatalf("%d series of %s while the probe fails, want none", n, name)
	}
	s.Record(ok(), false)
	if n := count(); n != 0 {
		t.Fatalf("%d series of %s after a run that was told none, want none", n, name)
	}
}

func helpOf(t *testing.T, name string) string {
	t.Helper()
	d := descConcurrent.String()
	_, rest, ok := strings.Cut(d, `help: "`)
	help, _, ok2 := strings.Cut(rest, `", `)
	if !ok || !ok2 || !strings.Contains(d, name) {
		t.Fatalf("cannot read the help of %s", d)
	}
	return help
}
