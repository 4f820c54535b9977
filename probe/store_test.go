package probe

import (
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/probetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func storeWithProbe() (*Store, *ProbeConfig) {
	p := smallSeq("s")
	s := NewStore()
	s.Configure(&Config{Targets: []*Target{{Name: "t", Probes: []*ProbeConfig{&p}}}}, nil)
	return s, &p
}

func TestStoreDropsRatesOfAFailingProbe(t *testing.T) {
	s, _ := storeWithProbe()
	end := time.Unix(1_700_000_000, 0)
	ok := &Result{Target: "t", Probe: "s", Kind: KindSequential, Start: end.Add(-time.Second), End: end, Direct: true, Engine: "sync",
		Ops: []OpResult{{Op: "write", Bytes: 1000, Operations: 10, Seconds: 2}}}
	s.Record(Outcome{Result: ok})
	const names = "plateau_probe_success plateau_probe_throughput_bytes_per_second plateau_probe_info"
	want := `
# HELP plateau_probe_info How the last successful run did its I/O: direct is true when O_DIRECT was used, engine names how requests were issued.
# TYPE plateau_probe_info gauge
plateau_probe_info{direct="true",engine="sync",kind="sequential",probe="s",target="t"} 1
# HELP plateau_probe_success 1 if the last run of the probe completed and measured, 0 if it failed or timed out.
# TYPE plateau_probe_success gauge
plateau_probe_success{kind="sequential",probe="s",target="t"} 1
# HELP plateau_probe_throughput_bytes_per_second Data moved per second by the op in the last successful run, in bytes per second (close and fsync included).
# TYPE plateau_probe_throughput_bytes_per_second gauge
plateau_probe_throughput_bytes_per_second{kind="sequential",op="write",probe="s",target="t"} 500
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), strings.Fields(names)...); err != nil {
		t.Fatal(err)
	}
	bad := &Result{Target: "t", Probe: "s", Kind: KindSequential, Start: end, End: end.Add(time.Second), Reason: ReasonEIO, Error: "read: input/output error"}
	s.Record(Outcome{Result: bad})
	want = `
# HELP plateau_probe_info How the last successful run did its I/O: direct is true when O_DIRECT was used, engine names how requests were issued.
# TYPE plateau_probe_info gauge
plateau_probe_info{direct="true",engine="sync",kind="sequential",probe="s",target="t"} 1
# HELP plateau_probe_success 1 if the last run of the probe completed and measured, 0 if it failed or timed out.
# TYPE plateau_probe_success gauge
plateau_probe_success{kind="sequential",probe="s",target="t"} 0
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), strings.Fields(names)...); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, s, "plateau_probe_errors_total", map[string]string{"reason": ReasonEIO}); got != 1 {
		t.Errorf("errors_total{reason=eio} = %v", got)
	}
	if got := counterValue(t, s, "plateau_probe_runs_total", map[string]string{"result": ResultFailure}); got != 1 {
		t.Errorf("runs_total{result=failure} = %v", got)
	}
}

func TestStoreKeepsCountersAcrossReload(t *testing.T) {
	s, p := storeWithProbe()
	s.Record(Outcome{Result: &Result{Target: "t", Probe: "s", Kind: KindSequential, Reason: ReasonEIO}})
	s.Configure(&Config{Targets: []*Target{{Name: "t", Probes: []*ProbeConfig{p}}}}, nil)
	if got := counterValue(t, s, "plateau_probe_errors_total", map[string]string{"reason": ReasonEIO}); got != 1 {
		t.Fatalf("counter reset by a reload: %v", got)
	}
	s.Configure(&Config{Targets: []*Target{{Name: "other", Probes: []*ProbeConfig{p}}}}, nil)
	if got := counterValue(t, s, "plateau_probe_errors_total", map[string]string{"target": "t"}); got != -1 {
		t.Fatalf("removed target still exported")
	}
}

func TestStoreAbandonedWorkerClosesTarget(t *testing.T) {
	s, _ := storeWithProbe()
	stuck := make(chan struct{})
	s.Abandon("t", stuck)
	if !s.Hung("t") || counterValue(t, s, "plateau_probe_abandoned_workers", nil) != 1 || counterValue(t, s, "plateau_probe_hung", nil) != 1 {
		t.Fatal("abandoned worker not reported")
	}
	close(stuck)
	probetest.WaitUntil(t, "the stuck worker to be released", 10*time.Second, func() bool { return !s.Hung("t") })
	if counterValue(t, s, "plateau_probe_hung", nil) != 0 {
		t.Fatal("hung still 1 after the worker exited")
	}
}

// A run that stopped itself at its own deadline is a timeout, the same as
// one the daemon killed.
func TestStoreCountsSelfStoppedRunAsTimeout(t *testing.T) {
	s, _ := storeWithProbe()
	s.Record(Outcome{Result: &Result{Target: "t", Probe: "s", Kind: KindSequential, Reason: ReasonTimeout}})
	s.Record(Outcome{Result: &Result{Target: "t", Probe: "s", Kind: KindSequential, Reason: ReasonTimeout}, TimedOut: true})
	if got := counterValue(t, s, "plateau_probe_runs_total", map[string]string{"result": ResultTimeout}); got != 2 {
		t.Errorf("runs_total{result=timeout} = %v, want 2", got)
	}
	if got := counterValue(t, s, "plateau_probe_runs_total", map[string]string{"result": ResultFailure}); got != 0 {
		t.Errorf("runs_total{result=failure} = %v, want 0", got)
	}
}

// Every io_bytes_total series exists from the start, the random probe's
// preallocation included, so increase() counts the first run's bytes.
func TestStoreStartsIOBytesAtZero(t *testing.T) {
	p := ProbeConfig{Name: "r", Kind: KindRandom}
	s := NewStore()
	s.Configure(&Config{Targets: []*Target{{Name: "t", Probes: []*ProbeConfig{&p}}}}, nil)
	for _, op := range []string{"read", "write", "prealloc"} {
		if got := counterValue(t, s, "plateau_probe_io_bytes_total", map[string]string{"op": op}); got != 0 {
			t.Errorf("io_bytes_total{op=%q} = %v before any run, want a zero series", op, got)
		}
	}
}
