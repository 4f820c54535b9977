package promfetch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/backtest"
)

// The backfilled history: two probes of one node, scraped every minute for
// two days, each run every 15 minutes, as the daemon would export them,
// and the results of a third with no last-success series.
const (
	fixtureJob      = "plateau"
	fixtureInstance = "node01:9731"
	fixtureTarget   = "scratch"
	historyLength   = 48 * time.Hour
	scrapeInterval  = time.Minute
	probeInterval   = 15 * time.Minute
	runsPerProbe    = int(historyLength / probeInterval)
	// No scrape in [gapStart, gapStart+gapLength): longer than the 5m
	// lookback, so the gauges vanish, and two seq runs end in it, the first
	// replaced by the second before anything scraped it.
	gapStart  = 30 * time.Hour
	gapLength = 20 * time.Minute
	// failedSeqRun leaves last_success and the results as they were.
	failedSeqRun = 20
	// shortSeqRun is followed by an extra run 61s later, so that only the
	// scrape between the two sees it: one step of a 1m query, which a
	// chunk boundary that skipped a step would lose.
	shortSeqRun = 40
	// blockSize is the ops-per-second divisor of the seq probe: 1 MiB
	// requests.
	blockSize = 1 << 20
)

// fixtureRun is one successful run of a fixture probe: when it ended (what
// last_success holds) and each op's result.
type fixtureRun struct {
	end    time.Time
	values map[string]float64
}

// fixtureProbe is a probe of the fixture and the metric families its op
// results are exported in.
type fixtureProbe struct {
	target, name, kind string
	ops                []string
	runs               []fixtureRun
	// families maps a metric name to an op's value in it.
	families map[string]func(v float64) float64
	// noLastSuccess leaves out the probe's last-success series, as a
	// relabeling that dropped or renamed it would.
	noLastSuccess bool
}

// fixtureHistory builds the two probes' runs from base on, and those of an
// orphan probe on another target whose last success is missing. Runs 10 to
// 12 of seq and 30 to 31 of meta's create repeat the value of the run
// before: the runs FetchPrometheus must not merge.
func fixtureHistory(base time.Time) []*fixtureProbe {
	seq := &fixtureProbe{target: fixtureTarget, name: "seq", kind: "sequential", ops: []string{"read", "write"},
		families: map[string]func(float64) float64{
			metricThroughput: func(v float64) float64 { return v },
			metricOpsRate:    func(v float64) float64 { return v / blockSize },
		}}
	meta := &fixtureProbe{target: fixtureTarget, name: "meta", kind: "metadata", ops: []string{"create", "stat"},
		families: map[string]func(float64) float64{
			metricOpsRate: func(v float64) float64 { return v },
		}}
	for k := 0; k < runsPerProbe; k++ {
		if k != failedSeqRun {
			kv := k
			if k == 11 || k == 12 {
				kv = 10
			}
			seq.runs = append(seq.runs, fixtureRun{
				// A quarter second, exact in binary, checks that the
				// fraction of the timestamp survives.
				end:    base.Add(time.Duration(k)*probeInterval + 40*time.Second + 250*time.Millisecond),
				values: map[string]float64{"read": 1e9 + float64(kv)*1e6, "write": 8e8 + float64(kv)*1e6},
			})
		}
		if k == shortSeqRun {
			prev := seq.runs[len(seq.runs)-1]
			seq.runs = append(seq.runs, fixtureRun{
				end:    prev.end.Add(61 * time.Second),
				values: map[string]float64{"read": 1.5e9, "write": 1.4e9},
			})
		}
		kc := k
		if k == 31 {
			kc = 30
		}
		meta.runs = append(meta.runs, fixtureRun{
			end:    base.Add(time.Duration(k)*probeInterval + 7*time.Minute + 12*time.Second + 500*time.Millisecond),
			values: map[string]float64{"create": 5e4 + float64(kc)*10, "stat": 2e5 + float64(k)*10},
		})
	}
	orphan := &fixtureProbe{target: "other", name: "orphan", kind: "sequential", ops: []string{"read"}, noLastSuccess: true,
		families: map[string]func(float64) float64{
			metricThroughput: func(v float64) float64 { return v },
		}}
	for k := 0; k < runsPerProbe; k++ {
		orphan.runs = append(orphan.runs, fixtureRun{end: base.Add(time.Duration(k)*probeInterval + time.Minute), values: map[string]float64{"read": 3e9}})
	}
	return []*fixtureProbe{seq, meta, orphan}
}

// scrapes are the times Prometheus scraped the node: every minute of the
// history but the gap.
func scrapes(base time.Time) []time.Time {
	var out []time.Time
	for d := time.Duration(0); d <= historyLength; d += scrapeInterval {
		if d >= gapStart && d < gapStart+gapLength {
			continue
		}
		out = append(out, base.Add(d))
	}
	return out
}

// latestRun is the index of the run whose results the daemon exports at t,
// or -1 before the first.
func (p *fixtureProbe) latestRun(t time.Time) int {
	i := -1
	for j, r := range p.runs {
		if !r.end.After(t) {
			i = j
		}
	}
	return i
}

// writeOpenMetrics writes what every scrape of the node returned, family by
// family and series by series, as promtool's backfill reads it.
func writeOpenMetrics(t *testing.T, path string, base time.Time, probes []*fixtureProbe) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	scr := scrapes(base)
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	labels := func(p *fixtureProbe, op string) string {
		l := fmt.Sprintf(`job=%q,instance=%q,target=%q,probe=%q,kind=%q`, fixtureJob, fixtureInstance, p.target, p.name, p.kind)
		if op != "" {
			l += fmt.Sprintf(`,op=%q`, op)
		}
		return l
	}
	for _, family := range []string{metricThroughput, metricOpsRate, metricLastSuccess} {
		fmt.Fprintf(w, "# TYPE %s gauge\n", family)
		for _, p := range probes {
			if family == metricLastSuccess {
				if p.noLastSuccess {
					continue
				}
				for _, s := range scr {
					if i := p.latestRun(s); i >= 0 {
						fmt.Fprintf(w, "%s{%s} %s %d\n", family, labels(p, ""), num(float64(p.runs[i].end.UnixMilli())/1e3), s.Unix())
					}
				}
				continue
			}
			conv, ok := p.families[family]
			if !ok {
				continue
			}
			for _, op := range p.ops {
				for _, s := range scr {
					if i := p.latestRun(s); i >= 0 {
						fmt.Fprintf(w, "%s{%s} %s %d\n", family, labels(p, op), num(conv(p.runs[i].values[op])), s.Unix())
					}
				}
			}
		}
	}
	fmt.Fprintln(w, "# EOF")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// entry is one run as the tests compare them.
type entry struct {
	At    time.Time
	Value float64
}

func (e entry) String() string {
	return fmt.Sprintf("%s=%g", e.At.UTC().Format("2006-01-02T15:04:05.000Z"), e.Value)
}

// expectedRuns is what a query over [from, to] at a step that sees every
// scrape must return for one op in one family: each run that was the latest
// at some scrape in the range, once, unless it ended before from.
func (p *fixtureProbe) expectedRuns(base, from, to time.Time, op, family string) []entry {
	var out []entry
	last := -1
	for _, s := range scrapes(base) {
		if s.Before(from) || s.After(to) {
			continue
		}
		i := p.latestRun(s)
		if i < 0 || i == last {
			continue
		}
		last = i
		if p.runs[i].end.Before(from) {
			continue
		}
		out = append(out, entry{p.runs[i].end, p.families[family](p.runs[i].values[op])})
	}
	return out
}

func entries(s backtest.Series) []entry {
	out := make([]entry, len(s.Times))
	for i := range s.Times {
		out[i] = entry{s.Times[i], s.Values[i]}
	}
	return out
}

// checkSeries compares what FetchPrometheus returned with want, by key,
// naming the first run that differs.
func checkSeries(t *testing.T, what string, got []backtest.Series, want map[string][]entry) {
	t.Helper()
	var keys []string
	for _, s := range got {
		keys = append(keys, s.Key)
	}
	var wantKeys []string
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	slices.Sort(wantKeys)
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("%s: got series %q, want %q (sorted)", what, keys, wantKeys)
	}
	for _, s := range got {
		if len(s.Times) != len(s.Values) {
			t.Fatalf("%s: %s has %d times and %d values", what, s.Key, len(s.Times), len(s.Values))
		}
		g, w := entries(s), want[s.Key]
		for i := 0; i < min(len(g), len(w)); i++ {
			if !g[i].At.Equal(w[i].At) || g[i].Value != w[i].Value {
				t.Fatalf("%s: %s run %d is %s, want %s (runs around it: got %v, want %v)", what, s.Key, i, g[i], w[i],
					g[max(0, i-2):min(len(g), i+3)], w[max(0, i-2):min(len(w), i+3)])
			}
		}
		if len(g) != len(w) {
			t.Fatalf("%s: %s has %d runs, want %d", what, s.Key, len(g), len(w))
		}
	}
}

// requirePrometheusTool finds a command of the Debian package prometheus,
// so that the Prometheus reader is never shipped untested.
func requirePrometheusTool(t *testing.T, name string) string {
	t.Helper()
	return probetest.RequireTool(t, name, "prometheus", "FetchPrometheus against a real Prometheus")
}

// startPrometheus runs the prometheus binary on an existing TSDB directory
// and returns its URL once it is ready. Prometheus cannot listen on port
// 0, so the test picks a free port and tries again with another when
// something took it in between. The process is killed and waited for in
// cleanup, before the temporary directories go.
func startPrometheus(t *testing.T, bin, dataDir string, flags ...string) string {
	t.Helper()
	config, err := filepath.Abs(filepath.Join("testdata", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	client := &http.Client{Timeout: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		addr := probetest.FreeAddr(t)
		logPath := filepath.Join(logDir, fmt.Sprintf("prometheus-%d.log", attempt))
		logFile, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+dataDir,
			// Nothing of the backfilled history may be deleted for its
			// age, however old the fixture's timestamps are made.
			"--storage.tsdb.retention.time=100y",
			"--web.listen-address="+addr, "--log.level=info")
		cmd.Args = append(cmd.Args, flags...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			logFile.Close()
			t.Fatalf("starting %s: %v", bin, err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait(); logFile.Close() }()
		exited := false
		t.Cleanup(func() {
			if !exited {
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("log of Prometheus attempt %d (%s):\n%s", attempt, logPath, tail(logPath, 30))
			}
		})
		url := "http://" + addr
		deadline := time.Now().Add(2 * time.Minute)
		for {
			select {
			case err := <-done:
				exited = true
				log := tail(logPath, 30)
				if strings.Contains(log, "address already in use") && attempt < 5 {
					t.Logf("port of %s was taken before Prometheus bound it; trying another", addr)
					break
				}
				t.Fatalf("prometheus exited while starting (%v); its log:\n%s", err, log)
			default:
			}
			if exited {
				break
			}
			if resp, err := client.Get(url + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return url
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("prometheus at %s not ready within 2m; its log:\n%s", url, tail(logPath, 30))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestFetchPrometheusFromBackfilledBlock backfills two days of two probes'
// history into a TSDB with promtool, serves it with the real prometheus
// binary, and checks that FetchPrometheus returns every run exactly once,
// including runs whose value repeats the one before, through chunked
// queries and across the scrape gap.
func TestFetchPrometheusFromBackfilledBlock(t *testing.T) {
	promtool := requirePrometheusTool(t, "promtool")
	prometheus := requirePrometheusTool(t, "prometheus")

	// Recent, and ending hours before now: the TSDB takes old blocks
	// (with the long retention) but not ones ahead of its clock. On a whole
	// hour so that 1m steps fall on the scrapes.
	base := time.Now().Add(-historyLength - 3*time.Hour).Truncate(time.Hour).UTC()
	end := base.Add(historyLength)
	probes := fixtureHistory(base)
	seq := probes[0]

	dir := t.TempDir()
	om := filepath.Join(dir, "history.om")
	writeOpenMetrics(t, om, base, probes)
	dataDir := filepath.Join(dir, "tsdb")
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, dataDir).CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, out)
	}
	// A second Prometheus serves a copy: the first may compact its blocks.
	smallDataDir := filepath.Join(dir, "tsdb-small")
	if err := os.CopyFS(smallDataDir, os.DirFS(dataDir)); err != nil {
		t.Fatal(err)
	}
	url := startPrometheus(t, prometheus, dataDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	throughput := fmt.Sprintf(`%s{target=%q}`, metricThroughput, fixtureTarget)
	wantThroughput := map[string][]entry{}
	for _, op := range seq.ops {
		wantThroughput[fixtureInstance+"/scratch/seq/"+op] = seq.expectedRuns(base, base, end, op, metricThroughput)
	}
	// The fixture's own shape, so that a wrong fixture cannot make the
	// test vacuous: all runs and the extra one but the failed one and the
	// one the gap hid, three in a row of one value among them.
	read := wantThroughput[fixtureInstance+"/scratch/seq/read"]
	if len(read) != runsPerProbe-1 {
		t.Fatalf("fixture: %d seq runs expected, want %d", len(read), runsPerProbe-1)
	}
	if read[10].Value != read[11].Value || read[11].Value != read[12].Value || read[10].At.Equal(read[11].At) {
		t.Fatalf("fixture: seq runs 10-12 should share a value: %v", read[9:14])
	}

	got, err := FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: throughput, Start: base, End: end, Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	checkSeries(t, "throughput at 1m", got, wantThroughput)

	// What an administrator does with them: replay the site's own history
	// through both rule sets.
	t.Run("the fetched series replay", func(t *testing.T) {
		o := replayOptions()
		o.Scale, o.Trials = 1, 5
		r, err := backtest.Run(ctx, got, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Series) == 0 || r.Series[0].Runs != len(got[0].Values) {
			t.Fatalf("replayed %+v of %d fetched series", r.Series, len(got))
		}
	})

	t.Run("identical consecutive runs stay separate", func(t *testing.T) {
		s := got[0] // node01:9731/scratch/seq/read
		for i := 10; i <= 12; i++ {
			want := base.Add(time.Duration(i)*probeInterval + 40*time.Second + 250*time.Millisecond)
			if !s.Times[i].Equal(want) || s.Values[i] != 1e9+10*1e6 {
				t.Errorf("%s run %d: %s=%g, want %s=%g", s.Key, i, s.Times[i], s.Values[i], want, 1e9+10*1e6)
			}
		}
	})

	t.Run("both metrics and probes", func(t *testing.T) {
		want := map[string][]entry{}
		for _, p := range probes[:2] {
			for family := range p.families {
				suffix := "/operations_per_second"
				if family == metricThroughput {
					suffix = "/bytes_per_second"
				}
				for _, op := range p.ops {
					want[fixtureInstance+"/scratch/"+p.name+"/"+op+suffix] = p.expectedRuns(base, base, end, op, family)
				}
			}
		}
		sel := `{__name__=~"plateau_probe_(throughput_bytes|operations)_per_second",job="plateau",target="scratch"}`
		got, err := FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: sel, Start: base, End: end})
		if err != nil {
			t.Fatal(err)
		}
		checkSeries(t, "both metrics", got, want)
		if n := len(want[fixtureInstance+"/scratch/meta/create/operations_per_second"]); n != runsPerProbe {
			t.Errorf("fixture: %d meta runs expected, want all %d (the gap delays one, hides none)", n, runsPerProbe)
		}
	})

	t.Run("past the 11,000 points of one query", func(t *testing.T) {
		// 48h at 10s is 17,280 steps: Prometheus refuses that in one
		// query, which is what the chunking is for.
		r := v1.Range{Start: base, End: end, Step: 10 * time.Second}
		c, err := api.NewClient(api.Config{Address: url})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := v1.NewAPI(c).QueryRange(ctx, throughput, r); err == nil || !strings.Contains(err.Error(), "11,000") {
			t.Fatalf("one query of %d steps: got error %v, want Prometheus's limit of 11,000 points", int(historyLength/r.Step), err)
		}
		got, err := FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: throughput, Start: base, End: end, Step: r.Step})
		if err != nil {
			t.Fatal(err)
		}
		checkSeries(t, "throughput at 10s", got, wantThroughput)
	})

	t.Run("many small chunks and a window inside the history", func(t *testing.T) {
		// The window starts 9m after a run, so that run is seen but not
		// returned. The one scrape that sees the short run is step 231
		// of the window: the first step of a chunk of 77 steps, the last
		// of one of 116, and inside one of 97.
		from, to := base.Add(6*time.Hour+10*time.Minute), base.Add(41*time.Hour)
		short := base.Add(shortSeqRun * probeInterval).Add(time.Minute) // the first scrape after it
		if n := short.Sub(from) / time.Minute; n != 231 {
			t.Fatalf("fixture: the short run is seen at step %d of the window, want 231", n)
		}
		want := map[string][]entry{}
		for _, op := range seq.ops {
			want[fixtureInstance+"/scratch/seq/"+op] = seq.expectedRuns(base, from, to, op, metricThroughput)
		}
		if w := want[fixtureInstance+"/scratch/seq/read"]; len(w) == 0 || w[0].At.Before(from) || w[0].At.Sub(from) > probeInterval {
			t.Fatalf("fixture: first run of the window should be within 15m after %s: %v", from, w[:min(len(w), 1)])
		}
		for _, points := range []int{77, 97, 116} {
			got, err := fetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: throughput, Start: from, End: to, Step: time.Minute}, points)
			if err != nil {
				t.Fatal(err)
			}
			checkSeries(t, fmt.Sprintf("window in chunks of %d steps", points), got, want)
		}
	})

	t.Run("a probe without last success is left out, with a warning", func(t *testing.T) {
		var warnings []string
		sel := metricThroughput + `{op="read"}`
		got, err := FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: sel, Start: base, End: end,
			Warn: func(w string) { warnings = append(warnings, w) }})
		if err != nil {
			t.Fatal(err)
		}
		key := fixtureInstance + "/scratch/seq/read"
		checkSeries(t, sel, got, map[string][]entry{key: wantThroughput[key]})
		if len(warnings) != 1 || !strings.Contains(warnings[0], `probe="orphan"`) || !strings.Contains(warnings[0], metricLastSuccess) {
			t.Fatalf("warnings %q, want one naming the orphan probe and %s", warnings, metricLastSuccess)
		}

		sel = metricThroughput + `{probe="orphan"}`
		_, err = FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: sel, Start: base, End: end,
			Warn: func(w string) { t.Errorf("warning %q with no data; want it in the error", w) }})
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(sel)) || !strings.Contains(err.Error(), `probe="orphan"`) {
			t.Fatalf("got error %v, want one naming %q and the orphan series", err, sel)
		}
	})

	t.Run("more samples than the server's query.max-samples", func(t *testing.T) {
		// 2,000 samples a query holds a 1m query of the two seq series to
		// under 1,000 steps, where 11,000 would need 22,000.
		small := startPrometheus(t, prometheus, smallDataDir, "--query.max-samples=2000")
		c, err := api.NewClient(api.Config{Address: small})
		if err != nil {
			t.Fatal(err)
		}
		r := v1.Range{Start: base, End: end, Step: time.Minute}
		if _, _, _, err := v1.NewAPI(c).QueryRange(ctx, throughput, r); !tooManySamples(err) {
			t.Fatalf("one query over the whole history: got error %v, want too many samples", err)
		}
		got, err := FetchPrometheus(ctx, PrometheusQuery{URL: small, Selector: throughput, Start: base, End: end, Step: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		checkSeries(t, "throughput with query.max-samples=2000", got, wantThroughput)
	})

	t.Run("selector matching nothing", func(t *testing.T) {
		sel := metricThroughput + `{target="nowhere"}`
		_, err := FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: sel, Start: base, End: end})
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(sel)) || !strings.Contains(err.Error(), "matched no series") {
			t.Fatalf("got error %v, want one naming %q as matching no series", err, sel)
		}
	})

	t.Run("selector of another metric", func(t *testing.T) {
		_, err := FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: metricLastSuccess, Start: base, End: end})
		if err == nil || !strings.Contains(err.Error(), "want only") {
			t.Fatalf("got error %v, want one refusing %s", err, metricLastSuccess)
		}
	})

	t.Run("selector Prometheus cannot parse", func(t *testing.T) {
		sel := metricThroughput + `{target=}`
		_, err := FetchPrometheus(ctx, PrometheusQuery{URL: url, Selector: sel, Start: base, End: end})
		var apiErr *v1.Error
		if err == nil || !errors.As(err, &apiErr) || !strings.Contains(err.Error(), "query "+strconv.Quote(sel)) {
			t.Fatalf("got error %v, want Prometheus's error for query %q", err, sel)
		}
	})
}

// stream is a model.SampleStream of values at whole minutes from t0, NaN
// for steps the series has no sample at.
func stream(m model.Metric, t0 time.Time, vals ...float64) *model.SampleStream {
	s := &model.SampleStream{Metric: m}
	for i, v := range vals {
		if math.IsNaN(v) {
			continue
		}
		s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t0.Add(time.Duration(i) * time.Minute).UnixNano()), Value: model.SampleValue(v)})
	}
	return s
}

func resultMetric(name, job, instance, probe, op string) model.Metric {
	return model.Metric{model.MetricNameLabel: model.LabelValue(name), "job": model.LabelValue(job), "instance": model.LabelValue(instance),
		"target": "scratch", "probe": model.LabelValue(probe), "kind": "sequential", "op": model.LabelValue(op)}
}

func lastSuccessMetric(job, instance, probe string) model.Metric {
	return model.Metric{model.MetricNameLabel: metricLastSuccess, "job": model.LabelValue(job), "instance": model.LabelValue(instance),
		"target": "scratch", "probe": model.LabelValue(probe), "kind": "sequential"}
}

// checkScratchN1Series holds that the splitter gave want, and that each
// series carries the labels --fleet groups it by (target scratch,
// instance n1), which want leaves out.
func checkScratchN1Series(t *testing.T, got, want []backtest.Series) {
	t.Helper()
	for i := range got {
		if got[i].Labels["target"] != "scratch" || got[i].Labels["instance"] != "n1" {
			t.Errorf("series %s has labels %v, want its target and instance among them", got[i].Key, got[i].Labels)
		}
		got[i].Labels = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestFetchPrometheusRunSplitting(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ts := func(sec float64) float64 { return float64(t0.Unix()) + sec }
	at := func(sec float64) time.Time { return unixSeconds(ts(sec)) }
	nan := math.NaN()

	t.Run("one entry per change of last success, same values included", func(t *testing.T) {
		sp := newRunSplitter(t0)
		res := stream(resultMetric(metricThroughput, "j", "n1", "seq", "read"), t0, 5, 5, 5, 5, 5, 7, nan, 7, 7)
		// Runs end at +30s, +150s (same value, 5) and +290s; the result is
		// missing at step 6 and last success at step 7, where neither can
		// be told apart from the run before.
		ls := stream(lastSuccessMetric("j", "n1", "seq"), t0, ts(30), ts(30), ts(150), ts(150), ts(150), ts(290), ts(290), nan, ts(290))
		if err := sp.add(model.Matrix{res}, model.Matrix{ls}); err != nil {
			t.Fatal(err)
		}
		got, err := sp.finish()
		if err != nil {
			t.Fatal(err)
		}
		want := []backtest.Series{{Key: "n1/scratch/seq/read", Times: []time.Time{at(30), at(150), at(290)}, Values: []float64{5, 5, 7}}}
		checkScratchN1Series(t, got, want)
	})

	t.Run("a run seen in two chunks is one entry; runs before start are dropped", func(t *testing.T) {
		sp := newRunSplitter(t0)
		m, lm := resultMetric(metricOpsRate, "j", "n1", "seq", "write"), lastSuccessMetric("j", "n1", "seq")
		// The first step shows a run that ended before the range.
		if err := sp.add(model.Matrix{stream(m, t0, 1, 2, 2)}, model.Matrix{stream(lm, t0, ts(-100), ts(60), ts(60))}); err != nil {
			t.Fatal(err)
		}
		t1 := t0.Add(3 * time.Minute)
		if err := sp.add(model.Matrix{stream(m, t1, 2, 3)}, model.Matrix{stream(lm, t1, ts(60), ts(200))}); err != nil {
			t.Fatal(err)
		}
		got, err := sp.finish()
		if err != nil {
			t.Fatal(err)
		}
		want := []backtest.Series{{Key: "n1/scratch/seq/write", Times: []time.Time{at(60), at(200)}, Values: []float64{2, 3}}}
		checkScratchN1Series(t, got, want)
	})

	t.Run("keys: job when several, metric when both, sorted; no-run series dropped", func(t *testing.T) {
		sp := newRunSplitter(t0)
		results := model.Matrix{
			stream(resultMetric(metricThroughput, "b", "n2", "seq", "read"), t0, 1, 1),
			stream(resultMetric(metricOpsRate, "a", "n1", "seq", "read"), t0, 2, 2),
			stream(resultMetric(metricThroughput, "a", "n1", "seq", "read"), t0, 3, 3),
			// No last success for this probe: matched, never a run.
			stream(resultMetric(metricThroughput, "a", "n1", "rand", "read"), t0, 4, 4),
		}
		lss := model.Matrix{
			stream(lastSuccessMetric("b", "n2", "seq"), t0, ts(10), ts(10)),
			stream(lastSuccessMetric("a", "n1", "seq"), t0, ts(20), ts(80)),
		}
		if err := sp.add(results, lss); err != nil {
			t.Fatal(err)
		}
		got, err := sp.finish()
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, s := range got {
			keys = append(keys, s.Key)
		}
		want := []string{"a/n1/scratch/seq/read/bytes_per_second", "a/n1/scratch/seq/read/operations_per_second", "b/n2/scratch/seq/read/bytes_per_second"}
		if !reflect.DeepEqual(keys, want) {
			t.Fatalf("keys %q, want %q", keys, want)
		}
		if len(got[0].Times) != 2 || len(got[2].Times) != 1 {
			t.Fatalf("runs: %+v", got)
		}
	})

	t.Run("two series with one key are an error", func(t *testing.T) {
		sp := newRunSplitter(t0)
		a := resultMetric(metricThroughput, "j", "n1", "seq", "read")
		b := a.Clone()
		b["kind"] = "random"
		ls := stream(lastSuccessMetric("j", "n1", "seq"), t0, ts(10))
		if err := sp.add(model.Matrix{stream(a, t0, 1), stream(b, t0, 2)}, model.Matrix{ls}); err != nil {
			t.Fatal(err)
		}
		if _, err := sp.finish(); err == nil || !strings.Contains(err.Error(), "both have key n1/scratch/seq/read") {
			t.Fatalf("got %v, want a key collision", err)
		}
	})

	t.Run("other metrics and missing labels are errors", func(t *testing.T) {
		ls := model.Matrix{stream(lastSuccessMetric("j", "n1", "seq"), t0, ts(10))}
		for _, m := range []model.Metric{
			resultMetric("plateau_probe_ratio", "j", "n1", "seq", "read"),
			{"job": "j", "instance": "n1", "target": "scratch", "probe": "seq", "op": "read"},
			resultMetric(metricThroughput, "j", "n1", "seq", ""),
		} {
			if err := newRunSplitter(t0).add(model.Matrix{stream(m, t0, 1)}, ls); err == nil {
				t.Errorf("%v: no error", m)
			}
		}
	})

	t.Run("disagreeing last-success series of one probe are an error", func(t *testing.T) {
		a := lastSuccessMetric("j", "n1", "seq")
		b := a.Clone()
		b["kind"] = "random"
		res := model.Matrix{stream(resultMetric(metricThroughput, "j", "n1", "seq", "read"), t0, 1)}
		if err := newRunSplitter(t0).add(res, model.Matrix{stream(a, t0, ts(10)), stream(b, t0, ts(20))}); err == nil {
			t.Fatal("no error")
		}
		if err := newRunSplitter(t0).add(res, model.Matrix{stream(a, t0, ts(10)), stream(b, t0, ts(10))}); err != nil {
			t.Fatalf("agreeing series: %v", err)
		}
	})

	t.Run("a clock stepped back keeps every run, oldest first", func(t *testing.T) {
		sp := newRunSplitter(t0.Add(-time.Hour))
		res := stream(resultMetric(metricThroughput, "j", "n1", "seq", "read"), t0, 1, 2, 3)
		ls := stream(lastSuccessMetric("j", "n1", "seq"), t0, ts(100), ts(40), ts(160))
		if err := sp.add(model.Matrix{res}, model.Matrix{ls}); err != nil {
			t.Fatal(err)
		}
		got, err := sp.finish()
		if err != nil {
			t.Fatal(err)
		}
		if want := []float64{2, 1, 3}; !reflect.DeepEqual(got[0].Values, want) || !got[0].Times[0].Equal(at(40)) {
			t.Fatalf("got %+v, want values %v from %s", got[0], want, at(40))
		}
	})
}

func TestFetchPrometheusChunks(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	step := time.Minute
	for _, c := range []struct {
		steps, maxPoints int
		want             int
	}{{0, 11000, 1}, {10999, 11000, 1}, {11000, 11000, 2}, {525600, 11000, 48}, {100, 10, 11}} {
		end := start.Add(time.Duration(c.steps) * step)
		rs := chunks(start, end, step, c.maxPoints)
		if len(rs) != c.want {
			t.Errorf("%d steps in chunks of %d: %d chunks, want %d", c.steps, c.maxPoints, len(rs), c.want)
		}
		next := start
		for i, r := range rs {
			if !r.Start.Equal(next) || r.End.Before(r.Start) || r.Step != step {
				t.Fatalf("%d steps: chunk %d is %v, want one starting at %s", c.steps, i, r, next)
			}
			if n := int(r.End.Sub(r.Start)/step) + 1; n > c.maxPoints {
				t.Fatalf("%d steps: chunk %d has %d points, over %d", c.steps, i, n, c.maxPoints)
			}
			next = r.End.Add(step)
		}
		if !rs[len(rs)-1].End.Equal(end) {
			t.Errorf("%d steps: last chunk ends at %s, want %s", c.steps, rs[len(rs)-1].End, end)
		}
	}
}

func TestFetchPrometheusHalve(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for _, n := range []int{2, 3, 10, 11000} {
		r := v1.Range{Start: start, End: start.Add(time.Duration(n-1) * time.Minute), Step: time.Minute}
		h, ok := halve(r)
		if !ok || len(h) != 2 || !h[0].Start.Equal(r.Start) || !h[1].End.Equal(r.End) || h[1].Start.Sub(h[0].End) != r.Step || h[0].End.Before(h[0].Start) {
			t.Errorf("%d steps: halves %v of %v", n, h, r)
		}
	}
	if _, ok := halve(v1.Range{Start: start, End: start, Step: time.Minute}); ok {
		t.Error("halved a single step")
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("prometheus x: query %q: %w", "q", &v1.Error{Type: v1.ErrExec, Msg: "query processing would load too many samples into memory in query execution"}), true},
		{&v1.Error{Type: v1.ErrBadData, Msg: "parse error"}, false},
		{errors.New("too many samples, but not from the API"), false},
		{nil, false},
	} {
		if got := tooManySamples(c.err); got != c.want {
			t.Errorf("tooManySamples(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestFetchPrometheusRefusesBadQueries(t *testing.T) {
	now := time.Now()
	good := PrometheusQuery{URL: "http://127.0.0.1:1", Selector: metricThroughput, Start: now.Add(-time.Hour), End: now}
	for name, edit := range map[string]func(*PrometheusQuery){
		"no scheme":      func(q *PrometheusQuery) { q.URL = "prometheus:9090" },
		"empty selector": func(q *PrometheusQuery) { q.Selector = " " },
		"end before":     func(q *PrometheusQuery) { q.Start, q.End = q.End, q.Start },
		"no start":       func(q *PrometheusQuery) { q.Start = time.Time{} },
		"negative step":  func(q *PrometheusQuery) { q.Step = -time.Minute },
	} {
		q := good
		edit(&q)
		if err := q.validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
}

// replayOptions are the backtest's options over the shipped rules, as
// its own tests replay with.
func replayOptions() backtest.Options {
	dashboards := filepath.Join("..", "..", "..", "dashboards")
	return backtest.Options{
		Interval: 15 * time.Minute, EvaluationInterval: 5 * time.Minute,
		BaselineRuns: 10, Drops: []float64{0.5}, InjectRuns: 20, Trials: 10, OnsetAfter: 30, Seed: 1,
		PageSeverity: "critical", Unit: probe.UnitBytesPerSecond, Scale: 1 << 20,
		Current:   []string{filepath.Join(dashboards, "rules.yml"), filepath.Join(dashboards, "alerts.yml"), filepath.Join(dashboards, "fleet_alerts.yml")},
		Reference: []string{filepath.Join(dashboards, "testdata", "reference", "rules.yml"), filepath.Join(dashboards, "testdata", "reference", "alerts.yml")},
	}
}
