package schedule

import (
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/iocount"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

// fakeCounters stands for a node whose own jobs read 4 MB and write
// nothing between any two samples, besides the probe's 2 MiB each way;
// every sample is 2 s after the previous one, so the result depends on no
// real timing.
type fakeCounters struct {
	mu    sync.Mutex
	n     uint64
	paths []string
}

func (f *fakeCounters) Sample(path string) (iocount.Sample, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.paths = append(f.paths, path)
	const probeBytes = 2 << 20
	return iocount.Sample{
		Read: f.n * (probeBytes + 4_000_000), Write: f.n * probeBytes,
		Source: iocount.SourceDiskstats, Key: "sda2", At: time.Unix(1_700_000_000+2*int64(f.n), 0),
	}, true
}

func TestSchedulerRecordsConcurrentIO(t *testing.T) {
	p := probefixture.SmallSeq("s") // 2 workers x 1 MiB, written and read
	p.Interval, p.Timeout = time.Second, 900*time.Millisecond
	path := t.TempDir()
	target := &probe.Target{Name: "t", Path: path, Probes: []*probe.ProbeConfig{&p}}
	counters := &fakeCounters{}
	results := store.New()
	s := New(Options{Logger: log.NewNopLogger(), Hostname: "node1", Runner: worker.InProcessRunner{}, Reporter: results, IOCounters: counters})
	results.Configure(&probe.Config{Targets: []*probe.Target{target}}, nil)
	s.Apply(&probe.Config{Targets: []*probe.Target{target}})
	t.Cleanup(s.Stop)
	probetest.WaitUntil(t, "a successful run", 60*time.Second, func() bool {
		return probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": store.ResultSuccess}) >= 1
	})
	s.Stop()
	// (4 MB over the 2 s between the samples) once the probe's bytes are
	// taken out; writes are all the probe's.
	if got := probetest.MetricValue(t, results, "plateau_probe_concurrent_bytes_per_second", map[string]string{"op": "read"}); got != 2e6 {
		t.Errorf("concurrent read = %v, want 2e6", got)
	}
	if got := probetest.MetricValue(t, results, "plateau_probe_concurrent_bytes_per_second", map[string]string{"op": "write"}); got != 0 {
		t.Errorf("concurrent write = %v, want 0", got)
	}
	counters.mu.Lock()
	defer counters.mu.Unlock()
	for _, got := range counters.paths {
		if got != path {
			t.Fatalf("sampled %s, want the target's path %s", got, path)
		}
	}
}

func TestProbeBytes(t *testing.T) {
	r := &probe.Result{Ops: []probe.OpResult{
		{Op: "create", Bytes: 10}, {Op: "stat", Bytes: 99}, {Op: "read", Bytes: 20}, {Op: "remove", Bytes: 99},
		{Op: "write", Bytes: 30}, {Op: probe.OpPrealloc, Bytes: 40}, {Op: "write", Bytes: -5},
	}}
	if rd, wr := probeBytes(r); rd != 20 || wr != 80 {
		t.Errorf("probeBytes = %d, %d; want 20 read, 80 written", rd, wr)
	}
}
