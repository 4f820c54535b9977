package alertstack

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/internal/probetest"
)

// PromAPI queries the test's Prometheus over its HTTP API
// (https://prometheus.io/docs/prometheus/latest/querying/api/).
type PromAPI struct{ url string }

type PromAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

func (p PromAPI) get(path string, params url.Values, data any) error {
	body, err := HTTPGet(p.url + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, env.Error)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (p PromAPI) alerts() ([]PromAlert, error) {
	var d struct {
		Alerts []PromAlert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", nil, &d)
	return d.Alerts, err
}

type Sample struct {
	Metric map[string]string
	Value  float64
}

// query evaluates an instant vector expression now.
func (p PromAPI) query(q string) ([]Sample, error) {
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {q}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", q, d.ResultType)
	}
	var out []Sample
	for _, r := range d.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %q: %w", q, s, err)
		}
		out = append(out, Sample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

// countOverRange returns, per series, how many samples the selector had
// from since until now: every sample Prometheus stored, not only those a
// range query's steps would land on.
func (p PromAPI) countOverRange(selector string, since time.Time) ([]Sample, error) {
	secs := int64(math.Ceil(time.Since(since).Seconds())) + 1
	return p.query(fmt.Sprintf("count_over_time(%s[%ds])", selector, secs))
}

// Proms is every Prometheus of a stack: the one that evaluates the
// fleet's alerts, and the racks' that scrape the nodes when the stack is
// split as README.md's "Prometheus for a fleet" (Options.Racks); with
// no racks, fleet is the one Prometheus that does everything. Its queries
// ask every server and put the answers together: an alert is evaluated on
// one of them (the node alerts on a rack, the fleet's at the top), and a
// node's own series are on its rack only.
type Proms struct {
	fleet PromAPI
	racks []PromAPI
}

// all are the racks' servers and the fleet's.
func (p Proms) all() []PromAPI { return append(slices.Clone(p.racks), p.fleet) }

// nodes are the servers that scrape the nodes.
func (p Proms) nodes() []PromAPI {
	if len(p.racks) > 0 {
		return p.racks
	}
	return []PromAPI{p.fleet}
}

// askEach asks each server and puts the answers together.
func askEach[T any](servers []PromAPI, ask func(PromAPI) ([]T, error)) ([]T, error) {
	var out []T
	for _, srv := range servers {
		got, err := ask(srv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", srv.url, err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// Query evaluates q on every server.
func (p Proms) Query(q string) ([]Sample, error) {
	return askEach(p.all(), func(srv PromAPI) ([]Sample, error) { return srv.query(q) })
}

// QueryNodes evaluates q on the servers that scrape the nodes, for the
// nodes' own series and records (the top one holds copies of some).
func (p Proms) QueryNodes(q string) ([]Sample, error) {
	return askEach(p.nodes(), func(srv PromAPI) ([]Sample, error) { return srv.query(q) })
}

// QueryOne evaluates an expression that must give exactly one sample,
// over every server.
func (p Proms) QueryOne(q string) (float64, error) {
	s, err := p.Query(q)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1: %v", q, len(s), s)
	}
	return s[0].Value, nil
}

// CountOverRange is PromAPI.countOverRange on every server.
func (p Proms) CountOverRange(selector string, since time.Time) ([]Sample, error) {
	return askEach(p.all(), func(srv PromAPI) ([]Sample, error) { return srv.countOverRange(selector, since) })
}

// Alerts are the pending and firing alerts of every server.
func (p Proms) Alerts() ([]PromAlert, error) {
	return askEach(p.all(), PromAPI.alerts)
}

// promServer is one Prometheus of a stack: its name (its config and data
// directory), the shipped rule files it evaluates (their shortened
// copies) and the alerts they hold with their shortened `for`, and how
// many scrape targets it has.
type promServer struct {
	name   string
	files  []string
	alerts map[string][]time.Duration
	up     int
	api    PromAPI
}

// startPrometheus starts one Prometheus of the stack with cfg, and
// returns p with its API.
func (s *Stack) startPrometheus(t *testing.T, promBin string, p promServer, cfg map[string]any) promServer {
	t.Helper()
	addr := probetest.FreeAddr(t)
	config := filepath.Join(s.Dir, p.name+".yml")
	writeYAML(t, config, cfg)
	data := filepath.Join(s.Dir, p.name+"-data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	// The resend delay shortened as the rules are (1m by default): an
	// alert's annotations reach Alertmanager again within a second, as
	// its description changes (the servers a file-system page names).
	proc := startProcess(t, p.name, s.Dir, promBin, "--config.file="+config, "--storage.tsdb.path="+data,
		"--web.listen-address="+addr, "--rules.alert.resend-delay=1s")
	p.api = PromAPI{url: "http://" + addr}
	WaitReady(t, proc, p.api.url+"/-/ready")
	return p
}

// shippedFederateJob is the scrape job of the shipped federate.yml, as a
// site merges it into its global Prometheus's config: pulling from the
// racks at addrs.
func shippedFederateJob(t *testing.T, addrs []string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(Shipped(t, FederateFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		ScrapeConfigs []map[string]any `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", FederateFile, err)
	}
	if len(f.ScrapeConfigs) != 1 {
		t.Fatalf("%s: %d scrape_configs, want 1", FederateFile, len(f.ScrapeConfigs))
	}
	job := f.ScrapeConfigs[0]
	job["static_configs"] = []any{map[string]any{"targets": addrs}}
	return job
}

// prometheusConfig is a Prometheus config that scrapes each job's
// addresses (job name to addresses) every interval, evaluates the rule
// files and sends to the Alertmanager at amAddr.
func prometheusConfig(every time.Duration, jobs map[string][]string, amAddr string, ruleFiles []string) map[string]any {
	iv := model.Duration(every).String()
	cfg := map[string]any{
		"global": map[string]any{
			"scrape_interval":     iv,
			"scrape_timeout":      iv,
			"evaluation_interval": iv,
		},
		"rule_files": ruleFiles,
		"alerting": map[string]any{
			"alertmanagers": []any{map[string]any{
				"static_configs": []any{map[string]any{"targets": []string{amAddr}}},
			}},
		},
	}
	var scrape []any
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		scrape = append(scrape, map[string]any{
			"job_name":       job,
			"static_configs": []any{map[string]any{"targets": jobs[job]}},
		})
	}
	cfg["scrape_configs"] = scrape
	return cfg
}

// waitScrapingAndEvaluating waits until one Prometheus of the stack
// scrapes every target it has and has evaluated every rule it loaded
// without error, and checks that it runs the shortened `for` of the
// alerts of its files, and no alert of another file.
func (s *Stack) waitScrapingAndEvaluating(t *testing.T, p promServer) {
	t.Helper()
	WaitFor(t, p.name+" to scrape every target", 2*time.Minute, func() (bool, error) {
		v, err := p.api.query(`up == 1`)
		if err == nil && len(v) != p.up {
			err = fmt.Errorf("%d of %d targets up", len(v), p.up)
		}
		return err == nil, err
	})
	type apiRule struct {
		Name      string  `json:"name"`
		Type      string  `json:"type"`
		Health    string  `json:"health"`
		LastError string  `json:"lastError"`
		Duration  float64 `json:"duration"`
	}
	var groups struct {
		Groups []struct {
			Name  string    `json:"name"`
			Rules []apiRule `json:"rules"`
		} `json:"groups"`
	}
	WaitFor(t, p.name+" to evaluate every rule", 2*time.Minute, func() (bool, error) {
		if err := p.api.get("/api/v1/rules", nil, &groups); err != nil {
			return false, err
		}
		n := 0
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" {
					return false, fmt.Errorf("rule %s in %s: health %q %s", r.Name, g.Name, r.Health, r.LastError)
				}
			}
		}
		return n > 0, nil
	})
	// It runs the shortened rules of its files: every alert's `for`, by
	// name (a name may have a rule per severity), as the shortened file
	// has it.
	loaded := map[string][]time.Duration{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				loaded[r.Name] = append(loaded[r.Name], time.Duration(r.Duration*float64(time.Second)))
			}
		}
	}
	for name := range loaded {
		if p.alerts[name] == nil {
			t.Fatalf("%s evaluates %s, which none of its files %v has", p.name, name, p.files)
		}
	}
	for name, w := range p.alerts {
		got := loaded[name]
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("%s loaded %s with for %v, want the shortened %v", p.name, name, got, w)
		}
	}
}

// LogSeriesHeld logs how many series each Prometheus of the stack holds
// in its head block: what the split costs where.
func (s *Stack) LogSeriesHeld(t *testing.T) {
	t.Helper()
	var parts []string
	for i, srv := range s.Prom.all() {
		var st struct {
			HeadStats struct {
				NumSeries int `json:"numSeries"`
			} `json:"headStats"`
		}
		if err := srv.get("/api/v1/status/tsdb", nil, &st); err != nil {
			t.Logf("series held: %v", err)
			return
		}
		name := "fleet"
		if i < len(s.Prom.racks) {
			name = fmt.Sprintf("rack %d", i+1)
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, st.HeadStats.NumSeries))
	}
	t.Logf("series held by each Prometheus: %s", strings.Join(parts, ", "))
}

// HeldIn returns the alerts named name that Prometheus holds now, pending
// or firing, for the instance when it is not "".
func (s *Stack) HeldIn(name, instance string) ([]PromAlert, error) {
	all, err := s.Prom.Alerts()
	if err != nil {
		return nil, err
	}
	var out []PromAlert
	for _, a := range all {
		if a.Labels["alertname"] == name && (instance == "" || a.Labels["instance"] == instance) {
			out = append(out, a)
		}
	}
	return out, nil
}
