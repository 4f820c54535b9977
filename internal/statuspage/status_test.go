package statuspage

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
)

// fixture is a store configured with one target and the sequential probe
// of probefixture's baselines, and the input the daemon would gather.
type fixture struct {
	cfg   *probe.Config
	store *store.Store
	now   time.Time
	next  time.Time
}

func newFixture(t *testing.T, target string) *fixture {
	t.Helper()
	b, err := plateau.ParseBaselines([]byte(strings.ReplaceAll(probefixture.BaselinesYAML, "\n  t:\n", "\n  "+jsonString(target)+":\n")), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	p := probefixture.SmallSeq("s")
	cfg := &probe.Config{Source: "/etc/plateau.yml", BaselinesFile: "b.yml", Targets: []*probe.Target{{
		Name: target, Path: "/scratch/" + target, WarningRatio: 0.8, CriticalRatio: 0.5, Probes: []*probe.ProbeConfig{&p},
	}}}
	s := store.New()
	s.Configure(cfg, b)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return &fixture{cfg: cfg, store: s, now: now, next: now.Add(42 * time.Second)}
}

// jsonString quotes s so that YAML reads it back as is.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (f *fixture) record(write, read float64, end time.Time) {
	f.store.Record(&probe.Result{Target: f.cfg.Targets[0].Name, Probe: "s", Kind: probe.KindSequential,
		Start: end.Add(-2 * time.Second), End: end, Direct: true, Engine: probe.EngineSync,
		Ops: []probe.OpResult{{Op: "write", Bytes: int64(write), Operations: 2, Seconds: 1}, {Op: "read", Bytes: int64(read), Operations: 2, Seconds: 1}}}, false)
}

func (f *fixture) input(collectors ...CollectorState) Input {
	return Input{
		Now: f.now, Hostname: "node1", Version: "test", Config: f.cfg, ConfigLoadedAt: f.now.Add(-time.Hour),
		Store: f.store.Snapshot(), Collectors: collectors,
		NextRun: func(*probe.Target, *probe.ProbeConfig, time.Time) time.Time { return f.next },
	}
}

func (f *fixture) page(t *testing.T, collectors ...CollectorState) *Page {
	t.Helper()
	p, err := New(Options{Name: "plateau_exporter", Links: []Link{{"/metrics", "Metrics"}, {"/status.json", "status.json"}},
		Gather: func() Input { return f.input(collectors...) }})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	resp := rec.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// gaugeOf is the value of the op's series of a metric the store exports,
// and whether there is one (no exported ratio is ever -1).
func gaugeOf(t *testing.T, c prometheus.Collector, name, op string) (float64, bool) {
	t.Helper()
	v := probetest.MetricValue(t, c, name, map[string]string{"op": op})
	return v, v != -1
}

// /status.json of a store fed with a run and a baseline: every field a
// script reads, with the ratio and verdict /metrics and `probe` give.
func TestStatusJSONShowsResultBesidePlateau(t *testing.T) {
	f := newFixture(t, "t")
	f.store.RecordSkip("t", "s", probe.SkipBudget)
	// write 500 B/s over a 1000 B/s plateau: 0.5, not below the critical
	// 0.5, so a warning; read 3000 over 2000: 1.5, ok.
	f.record(500, 3000, f.now.Add(-10*time.Second))
	at := f.now.Add(-3 * time.Second)
	resp, body := get(t, f.page(t, CollectorState{Name: "nfs", Scraped: true, Success: true, Duration: 3 * time.Millisecond, At: at}, CollectorState{Name: "gpfs"}).JSON(), "/status.json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	// The documented shape: every key present, absent numbers null.
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	wantKeys := map[string][]string{
		"":           {"schema_version", "generated_at", "hostname", "version", "config", "targets", "collectors", "node_jobs"},
		"config":     {"source", "loaded_at", "last_reload_error", "baselines_file", "baselines_error", "history_loaded", "history_write_errors"},
		"target":     {"name", "path", "configured", "warning_ratio", "critical_ratio", "when_job_running", "hung", "hung_since", "abandoned_workers", "probes"},
		"probe":      {"name", "kind", "params", "interval_seconds", "in_progress", "verdict", "note", "last_run", "since_last_run_seconds", "last_success_at", "next_run_at", "ops", "runs", "errors", "skips"},
		"last_run":   {"start", "end", "duration_seconds", "success", "reason", "error", "direct", "engine"},
		"op":         {"op", "unit", "value", "baseline", "baseline_spread", "ratio", "verdict", "note", "change_ratio", "change_noise", "change_fast_ratio", "change_fast_noise", "change_low_runs", "history_unit", "history"},
		"collectors": {"name", "scraped", "success", "duration_seconds", "at"},
	}
	target := raw["targets"].([]any)[0].(map[string]any)
	pr := target["probes"].([]any)[0].(map[string]any)
	objects := map[string]map[string]any{
		"": raw, "config": raw["config"].(map[string]any), "target": target, "probe": pr,
		"last_run": pr["last_run"].(map[string]any), "op": pr["ops"].([]any)[0].(map[string]any),
		"collectors": raw["collectors"].([]any)[1].(map[string]any),
	}
	for name, keys := range wantKeys {
		var got []string
		for k := range objects[name] {
			got = append(got, k)
		}
		slices.Sort(got)
		slices.Sort(keys)
		if !slices.Equal(got, keys) {
			t.Errorf("keys of %q: got %v, want %v", name, got, keys)
		}
	}

	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.SchemaVersion != SchemaVersion || st.Hostname != "node1" || !st.GeneratedAt.Equal(f.now) {
		t.Errorf("header: %+v", st)
	}
	if c := st.Config; c.Source != "/etc/plateau.yml" || c.BaselinesFile != "b.yml" || c.BaselinesError != "" || !c.HistoryLoaded || c.LoadedAt == nil {
		t.Errorf("config: %+v", c)
	}
	if len(st.Targets) != 1 || len(st.Targets[0].Probes) != 1 {
		t.Fatalf("targets: %+v", st.Targets)
	}
	tg := st.Targets[0]
	if tg.Name != "t" || tg.Path != "/scratch/t" || !tg.Configured || tg.Hung || tg.WarningRatio != 0.8 || tg.CriticalRatio != 0.5 {
		t.Errorf("target: %+v", tg)
	}
	p := tg.Probes[0]
	if p.Name != "s" || p.Kind != probe.KindSequential || p.Params != "sequential workers=2 file_size=1MiB block_size=256KiB" || p.IntervalSeconds != 60 {
		t.Errorf("probe: %+v", p)
	}
	if p.Verdict != plateau.VerdictWarning {
		t.Errorf("probe verdict %q, want warning (the worse of its ops)", p.Verdict)
	}
	if p.LastRun == nil || !p.LastRun.Success || p.LastRun.DurationSeconds != 2 || !p.LastRun.Direct || p.LastRun.Engine != probe.EngineSync {
		t.Errorf("last run: %+v", p.LastRun)
	}
	if p.SinceLastRunSeconds == nil || *p.SinceLastRunSeconds != 10 {
		t.Errorf("since last run %v, want 10 s", p.SinceLastRunSeconds)
	}
	if p.NextRunAt == nil || !p.NextRunAt.Equal(f.next) || p.LastSuccessAt == nil || !p.LastSuccessAt.Equal(f.now.Add(-10*time.Second)) {
		t.Errorf("next run %v, last success %v", p.NextRunAt, p.LastSuccessAt)
	}
	if p.Runs["success"] != 1 || p.Runs["skipped"] != 1 || p.Skips[probe.SkipBudget] != 1 || p.Errors[probe.ReasonEIO] != 0 {
		t.Errorf("counters: runs %v, skips %v, errors %v", p.Runs, p.Skips, p.Errors)
	}
	for _, r := range probe.ErrorReasons() {
		if _, ok := p.Errors[r]; !ok {
			t.Errorf("errors has no %q: every reason is listed, zero or not", r)
		}
	}
	want := map[string]struct {
		value, baseline, ratio float64
		verdict                string
	}{
		"write": {500, 1000, 0.5, plateau.VerdictWarning},
		"read":  {3000, 2000, 1.5, plateau.VerdictOK},
	}
	if len(p.Ops) != 2 {
		t.Fatalf("ops: %+v", p.Ops)
	}
	for _, o := range p.Ops {
		w := want[o.Op]
		if o.Unit != probe.UnitBytesPerSecond || o.Value == nil || *o.Value != w.value || o.Baseline == nil || *o.Baseline != w.baseline ||
			o.Ratio == nil || *o.Ratio != w.ratio || o.Verdict != w.verdict {
			t.Errorf("op %s: %+v, want %+v", o.Op, o, w)
		}
		// The same ratio as /metrics.
		if m, ok := gaugeOf(t, f.store, "plateau_probe_ratio", o.Op); !ok || o.Ratio == nil || m != *o.Ratio {
			t.Errorf("op %s: status ratio %v, plateau_probe_ratio %v (exported %v)", o.Op, o.Ratio, m, ok)
		}
		if !slices.Equal(o.History, []float64{w.value}) || o.ChangeRatio != nil {
			t.Errorf("op %s: history %v, change %v after one run", o.Op, o.History, o.ChangeRatio)
		}
	}
	if len(st.Collectors) != 2 || st.Collectors[0].Name != "nfs" || !st.Collectors[0].Success || st.Collectors[0].DurationSeconds != 0.003 ||
		st.Collectors[0].At == nil || st.Collectors[1].Scraped || st.Collectors[1].At != nil {
		t.Errorf("collectors: %+v", st.Collectors)
	}
}

// With enough runs the change ratio appears, the same as /metrics's.
func TestStatusJSONShowsChangeRatioOfTheStore(t *testing.T) {
	f := newFixture(t, "t")
	for i := range 24 {
		// Steady, then the last four at half: a change ratio near 0.5.
		v := 1000.0
		if i >= 20 {
			v = 500
		}
		f.record(v, 2*v, f.now.Add(time.Duration(i-30)*time.Minute))
	}
	st := Build(f.input())
	for _, o := range st.Targets[0].Probes[0].Ops {
		m, ok := gaugeOf(t, f.store, "plateau_probe_change_ratio", o.Op)
		if !ok || o.ChangeRatio == nil || *o.ChangeRatio != m || o.ChangeNoise == nil {
			t.Fatalf("op %s: status change %v, plateau_probe_change_ratio %v (exported %v)", o.Op, o.ChangeRatio, m, ok)
		}
		if o.ChangeFastRatio == nil || o.ChangeLowRuns == nil || *o.ChangeLowRuns < 2 {
			t.Errorf("op %s: fast change %v, low runs %v after halving, want both, at least 2 low runs", o.Op, o.ChangeFastRatio, o.ChangeLowRuns)
		}
		if math.Abs(*o.ChangeRatio-0.5) > 0.01 {
			t.Errorf("op %s: change ratio %v after halving, want 0.5", o.Op, *o.ChangeRatio)
		}
		if len(o.History) != 24 || o.History[23] != 500*map[string]float64{"write": 1, "read": 2}[o.Op] {
			t.Errorf("op %s: history %v", o.Op, o.History)
		}
	}
}

// A failed last run shows no rates and no ratio (as /metrics drops them),
// the reason, and the error counted by reason; a stuck worker makes the
// target hung.
func TestStatusJSONOfAFailedRunAndAHungTarget(t *testing.T) {
	f := newFixture(t, "t")
	f.record(1000, 2000, f.now.Add(-time.Minute))
	f.store.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: f.now.Add(-2 * time.Second), End: f.now.Add(-time.Second),
		Reason: probe.ReasonEIO, Error: "write /scratch/t/node1/f0: input/output error"}, false)
	before := time.Now()
	f.store.SetAbandoned("t", 1)
	after := time.Now()
	// A second stuck worker does not move the start of the hang.
	f.store.SetAbandoned("t", 2)
	st := Build(f.input())
	tg := st.Targets[0]
	if !tg.Hung || tg.AbandonedWorkers != 2 {
		t.Errorf("target: hung %v, abandoned %d", tg.Hung, tg.AbandonedWorkers)
	}
	if tg.HungSince == nil || tg.HungSince.Before(before) || tg.HungSince.After(after) {
		t.Errorf("target hung since %v, want the first SetAbandoned, between %v and %v", tg.HungSince, before, after)
	}
	f.now = after.Add(90 * time.Second)
	_, html := get(t, f.page(t).HTML(), "/")
	if want := "Hung since " + tg.HungSince.Format("2006-01-02 15:04:05 UTC") + " (1m30s ago)"; !strings.Contains(string(html), want) {
		t.Errorf("the page does not say since when the target is hung (%q):\n%s", want, html)
	}
	// Once the workers exit the target is no longer hung, and a later
	// hang starts its own time.
	f.store.SetAbandoned("t", 0)
	if tg := Build(f.input()).Targets[0]; tg.Hung || tg.HungSince != nil {
		t.Errorf("after the workers exited: hung %v since %v", tg.Hung, tg.HungSince)
	}
	f.store.SetAbandoned("t", 1)
	if tg := Build(f.input()).Targets[0]; tg.HungSince == nil || tg.HungSince.Before(after) {
		t.Errorf("a new hang kept the old start %v (first hang ended by %v)", tg.HungSince, after)
	}
	p := tg.Probes[0]
	if p.Verdict != plateau.VerdictFailed || !strings.Contains(p.Note, "input/output error") || p.LastRun.Success || p.LastRun.Reason != probe.ReasonEIO {
		t.Errorf("probe: verdict %q, note %q, last run %+v", p.Verdict, p.Note, p.LastRun)
	}
	if p.Errors[probe.ReasonEIO] != 1 || p.Runs["failure"] != 1 || p.LastSuccessAt == nil {
		t.Errorf("errors %v, runs %v, last success %v", p.Errors, p.Runs, p.LastSuccessAt)
	}
	for _, o := range p.Ops {
		if o.Value != nil || o.Ratio != nil || o.Verdict != plateau.VerdictFailed || o.Baseline == nil || len(o.History) != 1 {
			t.Errorf("op %s of a failed run: %+v", o.Op, o)
		}
		if _, ok := gaugeOf(t, f.store, "plateau_probe_ratio", o.Op); ok {
			t.Errorf("op %s: /metrics exports a ratio the page does not show", o.Op)
		}
	}
}

// Before the first run every op is pending and says why it has no
// plateau when it has none.
func TestStatusJSONBeforeTheFirstRun(t *testing.T) {
	f := newFixture(t, "t")
	f.store.Configure(f.cfg, nil) // no baselines could be loaded
	st := Build(f.input())
	p := st.Targets[0].Probes[0]
	if p.Verdict != VerdictPending || p.LastRun != nil || p.LastSuccessAt != nil {
		t.Errorf("probe before its first run: %+v", p)
	}
	for _, o := range p.Ops {
		if o.Verdict != VerdictPending || o.Baseline != nil || o.Note != "no baselines loaded" || o.History == nil {
			t.Errorf("op %s: %+v", o.Op, o)
		}
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(st); err != nil || !strings.Contains(b.String(), `"history": []`) && !strings.Contains(b.String(), `"history":[]`) {
		t.Errorf("history of a probe without runs is not an empty list: %v %s", err, b.String())
	}
}

// Names come from the config, which the page must show as text: in the
// HTML, in the SVG chart's text and title, and in attributes.
func TestStatusPageEscapesNames(t *testing.T) {
	name := `<script>alert("x")</script>`
	f := newFixture(t, name)
	for i := range 3 {
		f.record(900, 2100, f.now.Add(time.Duration(i-3)*time.Minute))
	}
	resp, body := get(t, f.page(t).HTML(), "/")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("HTTP %d, %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	page := string(body)
	if strings.Contains(strings.ToLower(page), "<script") {
		t.Fatalf("the page contains a script element:\n%s", page)
	}
	esc := `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`
	for what, re := range map[string]*regexp.Regexp{
		"the target's heading": regexp.MustCompile(`<h2>Target ` + regexp.QuoteMeta(esc) + `</h2>`),
		"the chart's caption":  regexp.MustCompile(`<svg class="runs"[^>]*>(?s:.*?)<text [^>]*>` + regexp.QuoteMeta(esc) + `/s write</text>`),
		"the chart's title":    regexp.MustCompile(`<svg class="runs"[^>]*>\s*<title>` + regexp.QuoteMeta(esc) + `/s write: last 3 runs</title>`),
		"the chart's label":    regexp.MustCompile(`aria-label="` + regexp.QuoteMeta(esc) + `/s write: last 3 runs"`),
	} {
		if !re.MatchString(page) {
			t.Errorf("%s does not show the name escaped (want %s)", what, esc)
		}
	}
	// The chart is drawn: three runs, the plateau, the verdict's colour on
	// the last run.
	if n := strings.Count(page, `<circle class="run"`); n != 4 { // two of each op
		t.Errorf("%d earlier runs drawn, want 4", n)
	}
	if !strings.Contains(page, `<circle class="last v-ok"`) || !strings.Contains(page, `class="plateau"`) {
		t.Errorf("chart without the last run's verdict or the plateau:\n%s", page)
	}
	// And the JSON carries the name as it is.
	_, js := get(t, f.page(t).JSON(), "/status.json")
	var st Status
	if err := json.Unmarshal(js, &st); err != nil || st.Targets[0].Name != name {
		t.Errorf("status.json name %q (%v)", st.Targets[0].Name, err)
	}
}

// Only "/" is the page, and neither endpoint changes anything.
func TestStatusPageMethodsAndPaths(t *testing.T) {
	f := newFixture(t, "t")
	p := f.page(t)
	if resp, _ := get(t, p.HTML(), "/nothing"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nothing: HTTP %d, want 404", resp.StatusCode)
	}
	for _, h := range []http.Handler{p.HTML(), p.JSON()} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST: HTTP %d, want 405", rec.Code)
		}
	}
	_, body := get(t, p.HTML(), "/")
	for _, want := range []string{`href="/metrics"`, `href="/status.json"`, "Probe s"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

// A run in another I/O mode than its baselines' shows the plateau but no
// ratio, and says why once for the probe; an op the run did not measure
// is not-measured.
func TestStatusJSONOfAnotherIOModeAndAnUnmeasuredOp(t *testing.T) {
	f := newFixture(t, "t")
	f.store.Record(&probe.Result{Target: "t", Probe: "s", Kind: probe.KindSequential, Start: f.now.Add(-time.Second), End: f.now,
		Direct: false, Engine: probe.EngineSync, Ops: []probe.OpResult{{Op: "write", Bytes: 900, Operations: 2, Seconds: 1}}}, false)
	p := Build(f.input()).Targets[0].Probes[0]
	if p.Verdict != plateau.VerdictNoBaseline || !strings.Contains(p.Note, "direct") {
		t.Errorf("probe: verdict %q, note %q", p.Verdict, p.Note)
	}
	w, r := p.Ops[0], p.Ops[1]
	if w.Op != "write" || w.Verdict != plateau.VerdictNoBaseline || w.Ratio != nil || w.Baseline == nil || w.Value == nil || *w.Value != 900 || w.Note != p.Note {
		t.Errorf("write: %+v", w)
	}
	if r.Op != "read" || r.Verdict != VerdictNotMeasured || r.Value != nil || r.Ratio != nil || r.Baseline == nil {
		t.Errorf("read: %+v", r)
	}
}

// A node a job holds says so above the targets, and each probe that waits
// for the job's end says it is skipped; /status.json carries the jobs. A
// probe that has not run since start has no "since last run".
func TestStatusPageShowsAJobHoldingTheNode(t *testing.T) {
	f := newFixture(t, "t")
	f.cfg.Targets[0].WhenJobRunning = probe.WhenJobSkip
	jobs := &NodeJobs{Running: true, Jobs: []string{"cgroup_v2:4242", "spool:4242"}, Sources: []string{"cgroup_v2", "spool"}}
	page, err := New(Options{Name: "plateau_exporter", Gather: func() Input {
		in := f.input()
		in.NodeJobs = jobs
		return in
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, page.HTML(), "/")
	for _, want := range []string{"A Slurm job holds this node now (cgroup_v2:4242, spool:4242)", "when a job runs: skip", "skipped while a job holds the node", "Last run: none since start"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	_, body = get(t, page.JSON(), "/status.json")
	var st Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.NodeJobs == nil || !st.NodeJobs.Running || !slices.Equal(st.NodeJobs.Jobs, jobs.Jobs) || st.Targets[0].WhenJobRunning != probe.WhenJobSkip ||
		st.Targets[0].Probes[0].SinceLastRunSeconds != nil {
		t.Errorf("status: node jobs %+v, target %+v", st.NodeJobs, st.Targets[0])
	}

	// A target that runs beside jobs is not said to be skipped, and a node
	// where no job can be seen says when_job_running does nothing.
	f.cfg.Targets[0].WhenJobRunning = probe.WhenJobRun
	_, body = get(t, page.HTML(), "/")
	if strings.Contains(string(body), "skipped while a job holds the node") {
		t.Error("a when_job_running: run target is shown as skipped")
	}
	jobs = &NodeJobs{}
	_, body = get(t, page.HTML(), "/")
	if !strings.Contains(string(body), "No Slurm job can be seen on this node") {
		t.Errorf("page of a node without Slurm does not say so:\n%s", body)
	}
}
