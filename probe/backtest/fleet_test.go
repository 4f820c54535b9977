package backtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/plateau-exporter/plateau_exporter/probe/backtest/ruleeval"
)

var (
	shippedAlertmanager = filepath.Join("..", "..", "dashboards", "alertmanager.yml")
	fleetReferenceRules = []string{filepath.Join("..", "..", "dashboards", "testdata", "reference-fleet", "rules.yml"), filepath.Join("..", "..", "dashboards", "testdata", "reference-fleet", "alerts.yml")}
)

// fleetCSV is a CSV file of a fleet: nodes probing one file system once a
// day, each a few minutes after the other, with 3% log-normal noise, and
// the file system's load from everyone else at loadFraction of its
// aggregate plateau.
func fleetCSV(nodes, days int, loadFraction float64) string {
	rng := rand.New(rand.NewPCG(7, 11))
	var b strings.Builder
	b.WriteString("system,file_system,app,op,start_unix,end_unix,mib_per_second,job_bytes,fs_bytes_same_direction\n")
	for d := 0; d < days; d++ {
		for n := 0; n < nodes; n++ {
			start := 1_500_000_000 + d*86400 + n*300
			rate := 1000 * math.Exp(0.03*rng.NormFloat64())
			job := rate * 60 * (1 << 20)
			// The whole file system: the run and everyone else, whose
			// rate is a fraction of the plateau (10x a node's rate).
			others := loadFraction * 10 * 1000 * (1 << 20) * 60 * (0.9 + 0.2*rng.Float64())
			fmt.Fprintf(&b, "sys,scratch,node%d,read,%d,%d,%.3f,%.0f,%.0f\n", n, start, start+60, rate, job, job+others)
		}
	}
	return b.String()
}

func fleetOptions() FleetOptions {
	o := FleetOptions{Options: testOptions(), GroupColumns: []string{"system", "file_system"}, Alertmanager: shippedAlertmanager}
	o.Current, o.Reference = shippedRules, fleetReferenceRules
	o.Drops, o.Trials, o.InjectRuns = []float64{0.5}, 4, 10
	return o
}

func readFleet(t *testing.T, csv string) []Series {
	t.Helper()
	s, err := ReadCSV(strings.NewReader(csv), "fleet.csv", CSVColumns{
		Series: []string{"system", "file_system", "app", "op"}, Time: "start_unix", Value: "mib_per_second",
		Labels: []string{"system", "file_system"}, FSBytes: "fs_bytes_same_direction", JobBytes: "job_bytes", End: "end_unix",
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A steady fleet pages on no unmodified day, and a fleet-wide halving is
// one file-system page within two intervals, one notification.
func TestFleetDropPagesOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a fleet")
	}
	series := readFleet(t, fleetCSV(6, 90, 0.1))
	if len(series[0].Others) == 0 || math.IsNaN(series[0].Others[0]) {
		t.Fatalf("no others' load read: %v", series[0].Others)
	}
	r, err := RunFleet(context.Background(), series, fleetOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Groups) != 1 || r.Groups[0].Key != "sys/scratch" || r.Groups[0].Series != 6 {
		t.Fatalf("groups %+v, want sys/scratch of 6 series", r.Groups)
	}
	g := r.Groups[0]
	if g.Current.FSPageFiringFraction != 0 {
		t.Errorf("a steady fleet paged %.3f of the time", g.Current.FSPageFiringFraction)
	}
	d := g.Current.Detect["0.5"]
	if d.Trials != 4 || d.FSPageWithin2 != 1 || d.NotificationsMedian != 1 {
		t.Errorf("a fleet-wide halving: %+v, want every trial paged within 2 intervals with one notification", d)
	}
	var out bytes.Buffer
	if err := r.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Groups []struct {
			Key     string `json:"key"`
			Current struct {
				Detect map[string]map[string]float64 `json:"detect"`
			} `json:"current"`
		} `json:"groups"`
		Summary map[string]map[string]any `json:"summary"`
	}
	if err := json.Unmarshal(out.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if _, ok := decoded.Groups[0].Current.Detect["0.5"]["fs_page_within_1"]; !ok {
		t.Errorf("JSON lacks detect[\"0.5\"].fs_page_within_1: %s", out.String())
	}
	if _, ok := decoded.Summary["current"]["fs_page_firing_fraction_max"]; !ok {
		t.Errorf("JSON summary lacks fs_page_firing_fraction_max: %s", out.String())
	}
	// The ground truth's contract: a steady fleet has no real fall, no
	// false page, no excess firing; every onset on it is calm, and the
	// halving stands out by far more than 3 deviations of 3% noise. The
	// fleet falls only with the drop, so its one notification is the
	// drop's.
	if g.Current.FalsePageEpisodesPerMonth != 0 || g.Current.ExcessFiringFraction != 0 || g.Current.RealFalls["0.3"].PagedFraction != nil {
		t.Errorf("a steady fleet: %+v", g.Current)
	}
	if c := g.Current.DetectCalm["0.5"]; c.Trials != 4 || c.FSPageWithin2 != 1 || c.NotificationsMedian != 1 || c.NotificationsAllMedian != 1 || c.Notifications2OrMore != 0 || g.Current.Detectability["0.5"] < 3 {
		t.Errorf("calm halvings: %+v, d %v", c, g.Current.Detectability)
	}
	var contract struct {
		Groups []struct {
			Current map[string]json.RawMessage `json:"current"`
		} `json:"groups"`
		Summary map[string]struct {
			FalsePages *float64                       `json:"false_page_episodes_per_month_max"`
			Excess     *float64                       `json:"excess_firing_fraction_max"`
			RealFalls  map[string]map[string]*float64 `json:"real_falls"`
			DetectCalm map[string]map[string]*float64 `json:"detect_calm"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(out.Bytes(), &contract); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"false_page_episodes_per_month", "excess_firing_fraction", "real_falls", "detect_calm", "detectability"} {
		if _, ok := contract.Groups[0].Current[k]; !ok {
			t.Errorf("JSON group lacks %s", k)
		}
	}
	sum := contract.Summary["reference"]
	if sum.FalsePages == nil || sum.Excess == nil || sum.DetectCalm["0.5"]["fs_page_within_1_median_detectable"] == nil || sum.DetectCalm["0.5"]["notifications_median_max"] == nil || sum.DetectCalm["0.5"]["notifications_all_median_max"] == nil || sum.DetectCalm["0.5"]["notifications_2_or_more_max"] == nil {
		t.Errorf("JSON summary lacks the ground truth's figures: %s", out.String())
	}
	if _, ok := sum.RealFalls["0.3"]["paged_fraction_min_detectable"]; !ok {
		t.Errorf("JSON summary lacks real_falls[\"0.3\"].paged_fraction_min_detectable")
	}
	// --trace-trials: each calm halving of both rule sets, one line; the
	// shipped rules' page starts within 2 intervals and still fires as
	// the window ends (an interval after the last dropped run, as the
	// first runs after the drop come in), its one notification the
	// drop's.
	var trace bytes.Buffer
	if err := r.WriteCalmTrials(&trace); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(trace.String()), "\n")
	if len(lines) != 8 {
		t.Fatalf("--trace-trials wrote %d lines, want 4 calm trials of each rule set:\n%s", len(lines), trace.String())
	}
	for _, line := range lines {
		var tr CalmTrial
		if err := json.Unmarshal([]byte(line), &tr); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if tr.RuleSet != RuleSetCurrent {
			continue
		}
		ok := tr.Group == "sys/scratch" && tr.Drop == 0.5 && tr.PagedWithin >= 1 && tr.PagedWithin <= 2 && tr.DropsNotifications == 1 &&
			len(tr.PageEpisodes) == 1 && tr.PageEpisodes[0].Start > 0 && tr.PageEpisodes[0].Start <= 2 && tr.PageEpisodes[0].End == nil &&
			len(tr.Notifications) == 1 && tr.Notifications[0].Alert == "PlateauFileSystemRegression" && tr.Notifications[0].Cause == causeDrop && tr.Notifications[0].After == tr.PageEpisodes[0].Start
		if !ok {
			t.Errorf("trace of a calm halving, shipped rules: %s", line)
		}
	}
	// --trace-pages: the steady fleet's page never fired, so no episode.
	if len(r.PageEpisodes) != 0 {
		t.Errorf("a steady fleet's page episodes traced: %+v", r.PageEpisodes)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil || !strings.Contains(table.String(), "sys/scratch") || !strings.Contains(table.String(), "calm ≤1") {
		t.Errorf("table (%v): %s", err, table.String())
	}
}

// The same drop while everyone else drives the file system at 90% of
// its aggregate plateau is contention: no file-system page.
func TestFleetDropOnABusyFileSystemIsNoPage(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a fleet")
	}
	series := readFleet(t, fleetCSV(6, 90, 1))
	o := fleetOptions()
	// The plateau is what the whole file system sustains: others' load
	// is then 90% or more of it.
	o.FSPlateau = map[string]float64{"sys/scratch": 10 * 1000 * (1 << 20)}
	r, err := RunFleet(context.Background(), series, o)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Groups[0].Current.Detect["0.5"]; d.FSPageWithin3 != 0 {
		t.Errorf("a drop on a busy file system paged: %+v", d)
	}
}

func TestNotifierInhibitsAsShipped(t *testing.T) {
	n, err := ruleeval.LoadNotifier(shippedAlertmanager)
	if err != nil {
		t.Fatal(err)
	}
	fs := labels.FromStrings("alertname", "PlateauFileSystemRegression", "job", "j", "target", "scratch", "severity", "critical")
	node := func(inst, target string) labels.Labels {
		return labels.FromStrings("alertname", "PlateauProbeRegression", "job", "j", "instance", inst, "target", target, "severity", "critical")
	}
	member := func(inst, target string) labels.Labels {
		return labels.FromStrings("alertname", "PlateauFileSystemIncident", "job", "j", "instance", inst, "target", target, "severity", "none")
	}
	for _, tc := range []struct {
		name   string
		firing []labels.Labels
		want   int
	}{
		{"the file system and its nodes", []labels.Labels{fs, node("a", "scratch"), node("b", "scratch")}, 1},
		{"nodes alone, one group per target", []labels.Labels{node("a", "scratch"), node("b", "scratch")}, 1},
		{"a node of another target", []labels.Labels{fs, node("a", "home")}, 2},
		// The incident's member notifies no one (the "null" receiver)
		// but holds back its own node's page, and only that node's.
		{"a member of the incident after the page ended", []labels.Labels{member("a", "scratch"), node("a", "scratch")}, 0},
		{"a node outside the incident", []labels.Labels{member("a", "scratch"), node("b", "scratch")}, 1},
	} {
		if got := n.Groups(tc.firing); len(got) != tc.want {
			t.Errorf("%s: groups %v, want %d", tc.name, got, tc.want)
		}
	}
	// Route keeps the inhibited alerts of a group among its firing ones,
	// and leaves out the member, which goes to no receiver: the
	// notification log needs to know a group still fires while nothing
	// of it is sent.
	routedGroups := n.Route([]labels.Labels{fs, node("a", "scratch"), member("a", "scratch")})
	if len(routedGroups) != 2 || len(routedGroups[0].Sent) != 1 || len(routedGroups[1].Firing) != 1 || len(routedGroups[1].Sent) != 0 {
		t.Errorf("the page, a node's inhibited page and its membership: routed %+v, want the page sent and the node's page firing, not sent", routedGroups)
	}
	// A child route to a receiver with an integration notifies; the
	// root's receiver always does, as the shipped file leaves its
	// integration to the site.
	routed, err := ruleeval.ParseNotifier([]byte("route:\n  receiver: oncall\n  group_by: [alertname]\n  routes:\n    - {matchers: [severity=\"none\"], receiver: mail}\n    - {matchers: [severity=\"info\"], receiver: oncall}\n    - {matchers: [severity=~\"none|debug\"], receiver: sink}\nreceivers:\n  - name: oncall\n  - name: mail\n    email_configs: [{to: a@b}]\n  - name: sink\n"), "routes.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		severity string
		want     int
	}{{"none", 1}, {"info", 1}, {"debug", 0}, {"critical", 1}} {
		if got := routed.Groups([]labels.Labels{labels.FromStrings("alertname", "A", "severity", tc.severity)}); len(got) != tc.want {
			t.Errorf("severity %s: groups %v, want %d", tc.severity, got, tc.want)
		}
	}
	if _, err := ruleeval.LoadNotifier(writeTemp(t, "route:\n  routes: [{matchers: ['a~~b'], receiver: x}]\n")); err == nil || !strings.Contains(err.Error(), "route.routes[0].matchers") {
		t.Errorf("a bad route matcher: %v", err)
	}
	if _, err := ruleeval.LoadNotifier(writeTemp(t, "inhibit_rules:\n  - source_matchers: ['alertname~~x']\n")); err == nil || !strings.Contains(err.Error(), "inhibit_rules[0].source_matchers") {
		t.Errorf("a bad matcher: %v", err)
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "alertmanager.yml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func FuzzParseNotifier(f *testing.F) {
	shipped, err := os.ReadFile(shippedAlertmanager)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(shipped))
	f.Add("inhibit_rules:\n  - source_matchers: [a=~\"(\"]\n")
	f.Add("route: {group_by: [x]}\ninhibit_rules: [{source_matchers: ['a = b'], target_matchers: [c!~\"d|e\"], equal: [f]}]\n")
	f.Add("route: {receiver: r, routes: [{matchers: [x=\"1\"], receiver: s}]}\nreceivers: [{name: r}, {name: s}]\n")
	f.Fuzz(func(t *testing.T, in string) {
		n, err := ruleeval.ParseNotifier([]byte(in), "fuzz.yml")
		if err != nil {
			return
		}
		// Whatever it read, it counts groups of alerts without failing.
		a := labels.FromStrings("alertname", "A", "x", "1")
		if got := n.Groups([]labels.Labels{a, a}); len(got) > 1 {
			t.Fatalf("two identical alerts in %d groups", len(got))
		}
	})
}

func FuzzReadCSVFleetColumns(f *testing.F) {
	f.Add(fleetCSV(2, 3, 0.5))
	f.Add("system,file_system,app,op,start_unix,end_unix,mib_per_second,job_bytes,fs_bytes_same_direction\ncori,cscratch,ior,read,10,5,1,2,\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ReadCSV(strings.NewReader(in), "fuzz.csv", CSVColumns{
			Series: []string{"app", "op"}, Time: "start_unix", Value: "mib_per_second",
			Labels: []string{"system", "file_system"}, FSBytes: "fs_bytes_same_direction", JobBytes: "job_bytes", End: "end_unix",
		})
		if err != nil {
			return
		}
		for _, x := range s {
			if x.Others != nil && len(x.Others) != len(x.Values) {
				t.Fatalf("series %q: %d others for %d runs", x.Key, len(x.Others), len(x.Values))
			}
			for _, o := range x.Others {
				if o < 0 {
					t.Fatalf("series %q: negative others' rate %g", x.Key, o)
				}
			}
		}
	})
}

// What Alertmanager sends as a first notification, step by step: a group
// whose alerts all resolved and fire again notifies again; one whose
// alerts were all inhibited for a while does not, nor one that gains an
// alert.
func TestNotificationLogCountsFirstNotifications(t *testing.T) {
	group := func(key string, firing []string, sent ...string) ruleeval.GroupAlerts {
		return ruleeval.GroupAlerts{Key: key, Firing: firing, Sent: sent}
	}
	l := notificationLog{}
	steps := []struct {
		what   string
		groups []ruleeval.GroupAlerts
		want   int
	}{
		{"nothing fires", nil, 0},
		{"the page fires", []ruleeval.GroupAlerts{group("page", []string{"p"}, "p")}, 1},
		{"it goes on", []ruleeval.GroupAlerts{group("page", []string{"p"}, "p")}, 0},
		{"a node's alert, inhibited", []ruleeval.GroupAlerts{group("page", []string{"p"}, "p"), group("node", []string{"a"})}, 0},
		{"the inhibition ends", []ruleeval.GroupAlerts{group("node", []string{"a"}, "a")}, 1},
		{"the node's alert inhibited again", []ruleeval.GroupAlerts{group("page", []string{"p"}, "p"), group("node", []string{"a"})}, 1},
		{"and sent again: no news", []ruleeval.GroupAlerts{group("node", []string{"a"}, "a")}, 0},
		{"a second node joins its group: an update", []ruleeval.GroupAlerts{group("node", []string{"a", "b"}, "a", "b")}, 0},
		{"all resolve", nil, 0},
		{"the node's alert fires again", []ruleeval.GroupAlerts{group("node", []string{"a"}, "a")}, 1},
	}
	total := 0
	for _, s := range steps {
		got := len(l.first(s.groups))
		if got != s.want {
			t.Errorf("%s: %d first notifications, want %d", s.what, got, s.want)
		}
		total += got
	}
	if total != 4 {
		t.Errorf("%d notifications in all, want 4: the page twice (it resolved in between), the node group twice", total)
	}
}
