package store

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// compareSeries fails the test unless s exports exactly the exposition want
// of the metrics named.
func compareSeries(t *testing.T, s *Store, want string, metrics ...string) {
	t.Helper()
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), metrics...); err != nil {
		t.Fatal(err)
	}
}

func storeWithProbe() (*Store, *probe.ProbeConfig) {
	p := probefixture.SmallSeq("s")
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{&p}}}}, nil)
	return s, &p
}

func TestStoreDropsRatesOfAFailingProbe(t *testing.T) {
	s, _ := storeWithProbe()
	end := time.Unix(1_700_000_000, 0)
	ok := &probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end.Add(-time.Second), End: end, Direct: true, Engine: "sync",
		Ops: []probe.OpResult{{Op: "write", Bytes: 1000, Operations: 10, Seconds: 2}}}
	s.Record(ok, false)
	const names = "plateau_probe_success plateau_probe_throughput_bytes_per_second plateau_probe_info"
	// The info of the last success stays through a failure.
	const infoAndSuccess = `
# HELP plateau_probe_info How the last successful run of the probe did its I/O: direct (O_DIRECT) and engine.
# TYPE plateau_probe_info gauge
plateau_probe_info{direct="true",engine="sync",kind="sequential",probe="s",target="t"} 1
# HELP plateau_probe_success 1 if the last run of the probe completed and measured, 0 if it failed or timed out.
# TYPE plateau_probe_success gauge
`
	want := infoAndSuccess + `plateau_probe_success{kind="sequential",probe="s",target="t"} 1
# HELP plateau_probe_throughput_bytes_per_second Bytes per second the op moved in the last successful run, close and fsync included.
# TYPE plateau_probe_throughput_bytes_per_second gauge
plateau_probe_throughput_bytes_per_second{kind="sequential",op="write",probe="s",target="t"} 500
`
	compareSeries(t, s, want, strings.Fields(names)...)
	bad := &probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: end, End: end.Add(time.Second), Reason: probe.ReasonEIO, Error: "read: input/output error"}
	s.Record(bad, false)
	want = infoAndSuccess + `plateau_probe_success{kind="sequential",probe="s",target="t"} 0
`
	compareSeries(t, s, want, strings.Fields(names)...)
	if got := probetest.MetricValue(t, s, "plateau_probe_errors_total", map[string]string{"reason": probe.ReasonEIO}); got != 1 {
		t.Errorf("errors_total{reason=eio} = %v", got)
	}
	if got := probetest.MetricValue(t, s, "plateau_probe_runs_total", map[string]string{"result": ResultFailure}); got != 1 {
		t.Errorf("runs_total{result=failure} = %v", got)
	}
}

func TestStoreKeepsCountersAcrossReload(t *testing.T) {
	s, p := storeWithProbe()
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Reason: probe.ReasonEIO}, false)
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{p}}}}, nil)
	if got := probetest.MetricValue(t, s, "plateau_probe_errors_total", map[string]string{"reason": probe.ReasonEIO}); got != 1 {
		t.Fatalf("counter reset by a reload: %v", got)
	}
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "other", Probes: []*probe.ProbeConfig{p}}}}, nil)
	if got := probetest.MetricValue(t, s, "plateau_probe_errors_total", map[string]string{"target": "t"}); got != -1 {
		t.Fatalf("removed target still exported")
	}
}

func TestStoreExportsAbandonedWorkers(t *testing.T) {
	s, _ := storeWithProbe()
	s.SetAbandoned("t", 2)
	if probetest.MetricValue(t, s, "plateau_probe_abandoned_workers", nil) != 2 || probetest.MetricValue(t, s, "plateau_probe_hung", nil) != 1 {
		t.Fatal("abandoned workers not exported")
	}
	// A reload that removes the target keeps it while its workers are stuck.
	s.Configure(&probe.Config{}, nil)
	if probetest.MetricValue(t, s, "plateau_probe_hung", nil) != 1 {
		t.Fatal("hung target dropped by a reload while its workers are stuck")
	}
	s.SetAbandoned("t", 0)
	if probetest.MetricValue(t, s, "plateau_probe_hung", nil) != 0 || probetest.MetricValue(t, s, "plateau_probe_abandoned_workers", nil) != 0 {
		t.Fatal("hung still 1 after the workers exited")
	}
}

// A run that stopped itself at its own deadline is a timeout, the same as
// one the daemon killed.
func TestStoreCountsSelfStoppedRunAsTimeout(t *testing.T) {
	s, _ := storeWithProbe()
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Reason: probe.ReasonTimeout}, false)
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Reason: probe.ReasonTimeout}, true)
	if got := probetest.MetricValue(t, s, "plateau_probe_runs_total", map[string]string{"result": ResultTimeout}); got != 2 {
		t.Errorf("runs_total{result=timeout} = %v, want 2", got)
	}
	if got := probetest.MetricValue(t, s, "plateau_probe_runs_total", map[string]string{"result": ResultFailure}); got != 0 {
		t.Errorf("runs_total{result=failure} = %v, want 0", got)
	}
}

// Every io_bytes_total series exists from the start, the random probe's
// preallocation included, so increase() counts the first run's bytes.
func TestStoreStartsIOBytesAtZero(t *testing.T) {
	p := probe.ProbeConfig{Name: "r", Kind: probe.KindRandom}
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{&p}}}}, nil)
	for _, op := range []string{"read", "write", "prealloc"} {
		if got := probetest.MetricValue(t, s, "plateau_probe_io_bytes_total", map[string]string{"op": op}); got != 0 {
			t.Errorf("io_bytes_total{op=%q} = %v before any run, want a zero series", op, got)
		}
	}
}

// A random probe's first run writes its kept file (op prealloc): those
// bytes are load, counted in io_bytes_total, but no result, so no
// throughput, operations or history series carries them.
func TestPreallocIsNoResult(t *testing.T) {
	p := probe.ProbeConfig{Name: "r", Kind: probe.KindRandom}
	s := New()
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{&p}}}}, nil)
	now := time.Now()
	s.Record(&probe.Result{Target: "t", Probe: "r", Kind: probe.KindRandom, Start: now.Add(-time.Second), End: now, Ops: []probe.OpResult{
		{Op: probe.OpPrealloc, Bytes: 1 << 20, Operations: 256, Seconds: 0.01},
		{Op: "read", Bytes: 4096 * 100, Operations: 100, Seconds: 0.05},
		{Op: "write", Bytes: 4096 * 50, Operations: 50, Seconds: 0.05},
	}}, false)
	for _, name := range []string{"plateau_probe_throughput_bytes_per_second", "plateau_probe_operations_per_second"} {
		n, err := testutil.GatherAndCount(registryOf(s), name)
		if err != nil || n != 2 {
			t.Errorf("%s: %d series (err %v), want read and write only", name, n, err)
		}
	}
	if got := probetest.MetricValue(t, s, "plateau_probe_io_bytes_total", map[string]string{"op": probe.OpPrealloc}); got != 1<<20 {
		t.Errorf("io_bytes_total{op=prealloc} = %v, want the 1 MiB written", got)
	}
	for k := range s.history {
		if k.Op == probe.OpPrealloc {
			t.Errorf("prealloc entered the run history: %+v", k)
		}
	}
}

func registryOf(c prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(c)
	return r
}
