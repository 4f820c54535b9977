package store

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

const changeHelp = `# HELP plateau_probe_change_noise_ratio Robust relative spread of the op's 4-run mean over the 30 runs before it.
# TYPE plateau_probe_change_noise_ratio gauge
# HELP plateau_probe_change_ratio Geometric mean of the op's last 4 results divided by the probe's recent normal.
# TYPE plateau_probe_change_ratio gauge
`

// configure gives s the sequential probe "s" of target "t", with baselines
// measured with O_DIRECT.
func configure(t *testing.T, s *Store, p *probe.ProbeConfig) {
	t.Helper()
	b, err := plateau.ParseBaselines([]byte(probefixture.BaselinesYAML), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{p}}}}, b)
}

var runEnd = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// recordRun records a successful run of "s" whose write and read ops moved
// write and read bytes per second. It runs in the page cache, unlike the
// baselines: the change ratio compares the probe with itself, so such a
// run counts all the same.
func recordRun(s *Store, write, read float64) {
	runEnd = runEnd.Add(time.Minute)
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: runEnd.Add(-time.Second), End: runEnd,
		Direct: false, Engine: probe.EngineSync,
		Ops: []probe.OpResult{{Op: "write", Bytes: int64(write), Operations: 1, Seconds: 1}, {Op: "read", Bytes: int64(read), Operations: 1, Seconds: 1}}}, false)
}

func changeOf(t *testing.T, s *Store, op string) (ratio, noise float64) {
	t.Helper()
	return probetest.MetricValue(t, s, "plateau_probe_change_ratio", map[string]string{"op": op}),
		probetest.MetricValue(t, s, "plateau_probe_change_noise_ratio", map[string]string{"op": op})
}

// A probe that always measures the same is as usual (1) with no noise
// (0); the statistic exists from the 17th run on, as its help says, and
// only while the last run succeeded.
func TestStoreChangeRatioOfAStableProbe(t *testing.T) {
	p := probefixture.SmallSeq("s")
	s := New()
	configure(t, s, &p)
	n := plateau.MinNormalRuns + 2*plateau.ChangeRuns - 1
	for i := 1; i < n; i++ {
		recordRun(s, 1000, 2000)
	}
	if c := testutil.CollectAndCount(s, "plateau_probe_change_ratio", "plateau_probe_change_noise_ratio"); c != 0 {
		t.Fatalf("%d change series after %d runs, want none before %d", c, n-1, n)
	}
	recordRun(s, 1000, 2000)
	want := changeHelp + `plateau_probe_change_noise_ratio{kind="sequential",op="read",probe="s",target="t"} 0
plateau_probe_change_noise_ratio{kind="sequential",op="write",probe="s",target="t"} 0
plateau_probe_change_ratio{kind="sequential",op="read",probe="s",target="t"} 1
plateau_probe_change_ratio{kind="sequential",op="write",probe="s",target="t"} 1
`
	compareSeries(t, s, want, "plateau_probe_change_ratio", "plateau_probe_change_noise_ratio")
	// The runs were in another I/O mode than the baselines': no ratio to
	// baseline, but a change ratio.
	if c := testutil.CollectAndCount(s, "plateau_probe_ratio"); c != 0 {
		t.Fatalf("%d ratios to baseline for runs in another I/O mode", c)
	}
	s.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Reason: probe.ReasonEIO}, false)
	if c := testutil.CollectAndCount(s, "plateau_probe_change_ratio", "plateau_probe_change_noise_ratio"); c != 0 {
		t.Fatalf("%d change series while the probe fails", c)
	}
}

// recordNormal records the 33 runs before the last 4 of a full history,
// alternating between two levels a factor 2 apart, as some production
// series do. Their 4-run mean is steady (noise 0), and single runs are
// spread widely enough that a halving is not clipped by the statistic's
// winsorizing of outliers.
func recordNormal(s *Store) {
	for i := 0; i < plateau.HistoryRuns-plateau.ChangeRuns; i++ {
		recordRun(s, 700*float64(1+i%2), 1400*float64(1+i%2))
	}
}

func TestStoreChangeRatioOfAHalving(t *testing.T) {
	p := probefixture.SmallSeq("s")
	s := New()
	configure(t, s, &p)
	recordNormal(s)
	// The write op halves in the last 4 runs, the read op does not.
	for i := 0; i < plateau.ChangeRuns; i++ {
		recordRun(s, 350*float64(1+(i+1)%2), 1400*float64(1+(i+1)%2))
	}
	ratio, noise := changeOf(t, s, "write")
	if math.Abs(ratio-0.5) > 1e-9 || noise != 0 {
		t.Errorf("write halved: change ratio %v, noise %v; want 0.5, 0", ratio, noise)
	}
	if ratio, _ := changeOf(t, s, "read"); math.Abs(ratio-1) > 1e-9 {
		t.Errorf("read unchanged: change ratio %v, want 1", ratio)
	}
}

// A restart keeps the history: the new store's first run has a change
// ratio, and the same one as if the daemon had not restarted.
func TestStoreHistorySurvivesRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "history.json")
	p := probefixture.SmallSeq("s")
	before, continuous := Open(Options{HistoryFile: file}), New()
	configure(t, before, &p)
	configure(t, continuous, &p)
	recordNormal(before)
	recordNormal(continuous)

	after := Open(Options{HistoryFile: file})
	if got := probetest.MetricValue(t, after, "plateau_probe_history_last_load_successful", nil); got != 1 {
		t.Fatalf("history_last_load_successful = %v after loading a good file", got)
	}
	configure(t, after, &p)
	for i := 0; i < plateau.ChangeRuns; i++ {
		recordRun(continuous, 500, 1400)
		recordRun(after, 500, 1400)
	}
	got, _ := changeOf(t, after, "write")
	want, _ := changeOf(t, continuous, "write")
	if got == -1 || got != want {
		t.Fatalf("change ratio after a restart %v, without one %v", got, want)
	}
	h, err := plateau.LoadHistoryFile(file)
	if err != nil {
		t.Fatal(err)
	}
	e := h[plateau.HistoryKey{Target: "t", Probe: "s", Op: "write", Params: plateau.ProbeParams(&p)}]
	if len(e.Results) != plateau.HistoryRuns || e.Results[len(e.Results)-1] != 500 || !e.Updated.Equal(runEnd) {
		t.Fatalf("history file's write entry: %d results ending %v, updated %v; want %d ending 500 at %v",
			len(e.Results), e.Results[len(e.Results)-1], e.Updated, plateau.HistoryRuns, runEnd)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("history file: %v, %v; want mode 0640", fi, err)
	}
}

// A file that cannot be loaded is set aside, not deleted, and the daemon
// goes on with an empty history that it saves afresh.
func TestStoreSetsACorruptHistoryFileAside(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "history.json")
	garbage := []byte("{\"version\": 1, \"entries\": [\x00 not json")
	if err := os.WriteFile(file, garbage, 0o640); err != nil {
		t.Fatal(err)
	}
	logs := &probetest.LogBuffer{}
	s := Open(Options{HistoryFile: file, Logger: log.NewLogfmtLogger(logs)})
	if got := probetest.MetricValue(t, s, "plateau_probe_history_last_load_successful", nil); got != 0 {
		t.Fatalf("history_last_load_successful = %v after a corrupt file, want 0", got)
	}
	aside, _ := filepath.Glob(file + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("set aside as %v, want one %s.corrupt-* file", aside, file)
	}
	if data, err := os.ReadFile(aside[0]); err != nil || string(data) != string(garbage) {
		t.Fatalf("%s: %q, %v; want the corrupt file as it was", aside[0], data, err)
	}
	if !strings.Contains(logs.String(), "level=warn") || !strings.Contains(logs.String(), file) || !strings.Contains(logs.String(), "invalid character") {
		t.Errorf("log does not warn with the file and the reason:\n%s", logs)
	}
	p := probefixture.SmallSeq("s")
	configure(t, s, &p)
	recordRun(s, 1000, 2000)
	if got := probetest.MetricValue(t, s, "plateau_probe_success", nil); got != 1 {
		t.Fatalf("probe_success = %v after a run", got)
	}
	h, err := plateau.LoadHistoryFile(file)
	if err != nil || len(h) != 2 {
		t.Fatalf("history written after the first run: %v, %v; want its two ops", h, err)
	}
	if got := probetest.MetricValue(t, s, "plateau_probe_history_write_errors_total", nil); got != 0 {
		t.Fatalf("history_write_errors_total = %v", got)
	}
}

// A reload that changes a probe's parameters starts its history anew: its
// runs measure something else. One that keeps them keeps it, and a removed
// probe's history is dropped.
func TestStoreResetsHistoryWhenParamsChange(t *testing.T) {
	file := filepath.Join(t.TempDir(), "history.json")
	p := probefixture.SmallSeq("s")
	s := Open(Options{HistoryFile: file})
	configure(t, s, &p)
	recordNormal(s)
	configure(t, s, &p)
	recordRun(s, 1000, 2000)
	if ratio, _ := changeOf(t, s, "write"); ratio == -1 {
		t.Fatal("a reload with the same parameters dropped the history")
	}

	bigger := p
	bigger.Workers = 4
	configure(t, s, &bigger)
	recordRun(s, 1000, 2000)
	if ratio, _ := changeOf(t, s, "write"); ratio != -1 {
		t.Fatalf("change ratio %v right after the probe's parameters changed", ratio)
	}
	h, err := plateau.LoadHistoryFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 {
		t.Errorf("history file holds %d entries, want the new parameters' two ops", len(h))
	}
	for k, e := range h {
		if k.Params != plateau.ProbeParams(&bigger) || len(e.Results) != 1 {
			t.Errorf("entry %+v with %d results; want only the new parameters' one run", k, len(e.Results))
		}
	}

	s.Configure(&probe.Config{}, nil)
	if len(s.history) != 0 {
		t.Errorf("history of a removed probe kept: %v", s.history)
	}
}

// A history file that cannot be written is logged and counted; the probe
// metrics go on.
func TestStoreCountsHistoryWriteErrors(t *testing.T) {
	logs := &probetest.LogBuffer{}
	file := filepath.Join(t.TempDir(), "missing-dir", "history.json")
	s := Open(Options{HistoryFile: file, Logger: log.NewLogfmtLogger(logs)})
	if got := probetest.MetricValue(t, s, "plateau_probe_history_last_load_successful", nil); got != 1 {
		t.Fatalf("history_last_load_successful = %v for a file that does not exist yet, want 1", got)
	}
	p := probefixture.SmallSeq("s")
	configure(t, s, &p)
	recordRun(s, 1000, 2000)
	recordRun(s, 1000, 2000)
	if got := probetest.MetricValue(t, s, "plateau_probe_history_write_errors_total", nil); got != 2 {
		t.Errorf("history_write_errors_total = %v, want 2", got)
	}
	if got := probetest.MetricValue(t, s, "plateau_probe_runs_total", map[string]string{"result": ResultSuccess}); got != 2 {
		t.Errorf("runs_total{result=success} = %v, want 2", got)
	}
	if !strings.Contains(logs.String(), "level=error") || !strings.Contains(logs.String(), file) {
		t.Errorf("write error not logged with the file:\n%s", logs)
	}
}

// Runs that end together write concurrently; the file ends with the last
// history, never an older snapshot written late.
func TestStoreConcurrentRunsLeaveTheLatestHistory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "history.json")
	const probes, runs = 4, 20
	var cfgProbes []*probe.ProbeConfig
	for i := 0; i < probes; i++ {
		p := probefixture.SmallSeq(fmt.Sprintf("p%d", i))
		cfgProbes = append(cfgProbes, &p)
	}
	s := Open(Options{HistoryFile: file})
	s.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: cfgProbes}}}, nil)
	var wg sync.WaitGroup
	for _, p := range cfgProbes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= runs; i++ {
				s.Record(&probe.Result{Target: "t", Probe: p.Name, Kind: probe.KindSequential, End: time.Now(),
					Ops: []probe.OpResult{{Op: "write", Bytes: int64(i), Seconds: 1}}}, false)
				_ = testutil.CollectAndCount(s) // a scrape in between
			}
		}()
	}
	wg.Wait()
	h, err := plateau.LoadHistoryFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != probes {
		t.Fatalf("%d entries, want %d", len(h), probes)
	}
	for k, e := range h {
		if len(e.Results) != runs || e.Results[runs-1] != runs {
			t.Errorf("%s: %d results ending %v; want %d ending %d", k.Probe, len(e.Results), e.Results[len(e.Results)-1], runs, runs)
		}
	}
	if got := probetest.MetricValue(t, s, "plateau_probe_history_write_errors_total", nil); got != 0 {
		t.Errorf("history_write_errors_total = %v", got)
	}
}
