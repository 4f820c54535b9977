package store

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/iocount"
)

// The node's own I/O is exported beside the last successful run, and only
// while the probe's last run succeeded, as its throughput is.
func TestStoreExportsConcurrentIO(t *testing.T) {
	s, _ := storeWithProbe()
	const name = "plateau_probe_concurrent_bytes_per_second"
	end := time.Unix(1_700_000_000, 0)
	ok := func() *probe.Result {
		return &probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end, Engine: "sync",
			Ops: []probe.OpResult{{Op: "write", Bytes: 1000, Operations: 10, Seconds: 2}}}
	}
	count := func() int { return testutil.CollectAndCount(s, name) }

	s.RecordConcurrent("t", "s", iocount.Rate{}, false)
	s.Record(ok(), false)
	if n := count(); n != 0 {
		t.Fatalf("%d series of %s when no counters applied, want none", n, name)
	}

	s.RecordConcurrent("t", "s", iocount.Rate{Read: 1.5e6, Write: 0, Source: iocount.SourceDiskstats}, true)
	s.Record(ok(), false)
	want := `
# HELP plateau_probe_concurrent_bytes_per_second ` + helpOf(t, name) + `
# TYPE plateau_probe_concurrent_bytes_per_second gauge
plateau_probe_concurrent_bytes_per_second{kind="sequential",op="read",probe="s",target="t"} 1.5e+06
plateau_probe_concurrent_bytes_per_second{kind="sequential",op="write",probe="s",target="t"} 0
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), name); err != nil {
		t.Fatal(err)
	}

	// A failed run hides it; the rate told for a run is never carried to
	// the next one.
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end, End: end, Reason: probe.ReasonEIO}, false)
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
