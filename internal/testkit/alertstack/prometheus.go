package alertstack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/wait"
	"github.com/prometheus/common/model"
)

// waitPoll is how often the tests look at Prometheus, Alertmanager and
// the webhook; every wait has a deadline of minutes on top.
const waitPoll = 500 * time.Millisecond

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
	return p.query(fmt.Sprintf("count_over_time(%s[%s])", selector, rangeSince(since)))
}

// rangeSince is a PromQL range from since until now, a second longer so
// that the sample at since is inside it.
func rangeSince(since time.Time) string {
	return fmt.Sprintf("%ds", int64(math.Ceil(time.Since(since).Seconds()))+1)
}

// Proms is every Prometheus of a stack: the one that evaluates the
// fleet's alerts, and the racks' that scrape the nodes when the stack is
// split as docs/fleet.md's "Prometheus for a fleet" (Options.Racks); with
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

// WaitFor polls cond every waitPoll until it holds, failing the test at
// the deadline with the last error cond gave.
func WaitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	wait.UntilWith(t, wait.Options{Every: waitPoll}, what, timeout, cond)
}

// HTTPClient is what the stack asks its servers with: a deadline on every
// request, so that a hung server fails a wait instead of blocking it.
var HTTPClient = &http.Client{Timeout: 10 * time.Second}

// HTTPGet returns the body of a 200 answer to GET url, or an error that
// names the status and carries the body.
func HTTPGet(url string) ([]byte, error) {
	resp, err := HTTPClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}
