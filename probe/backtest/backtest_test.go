package backtest

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

var (
	shippedRules   = []string{filepath.Join("..", "..", "dashboards", "rules.yml"), filepath.Join("..", "..", "dashboards", "alerts.yml"), filepath.Join("..", "..", "dashboards", "fleet_alerts.yml")}
	referenceRules = []string{filepath.Join("..", "..", "dashboards", "testdata", "reference", "rules.yml"), filepath.Join("..", "..", "dashboards", "testdata", "reference", "alerts.yml")}
)

func TestReadCSVNamesFileLineAndColumn(t *testing.T) {
	cols := CSVColumns{Series: []string{"fs", "op"}, Time: "start", Value: "mibs"}
	for _, tc := range []struct{ in, want string }{
		{"fs,op,start\n", `runs.csv:1: no column "mibs" (--value-column)`},
		{"fs,op,start,mibs\nscratch,read,12,5\nscratch,read,x,5\n", `runs.csv:3: column start: "x" is not a Unix time`},
		{"fs,op,start,mibs\nscratch,read,12,-5\n", `runs.csv:2: column mibs: "-5" is not a result`},
		{"fs,op,start,mibs\n", "runs.csv: no runs after the header"},
	} {
		_, err := ReadCSV(strings.NewReader(tc.in), "runs.csv", cols)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.in, err, tc.want)
		}
	}
	s, err := ReadCSV(strings.NewReader("fs,op,start,mibs\nb,read,20,2\na,write,10,1\nb,read,10,1\n"), "runs.csv", cols)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0].Key != "a/write" || s[1].Key != "b/read" || s[1].Values[0] != 1 || s[1].Values[1] != 2 {
		t.Fatalf("series not grouped and sorted by key and time: %+v", s)
	}
}

func FuzzReadCSV(f *testing.F) {
	f.Add("system,file_system,app,op,start_unix,end_unix,mib_per_second\ncori,cscratch,ior,read,1487068758,1487068796,226691.197\n")
	f.Add("a,b\n1,2\n")
	f.Add(twoShapes)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ReadCSV(strings.NewReader(in), "fuzz.csv", CSVColumns{Series: []string{"system", "op"}, Time: "start_unix", Value: "mib_per_second", Shape: []string{"nprocs", "job_bytes"}})
		if err != nil {
			return
		}
		for _, x := range s {
			if len(x.Times) != len(x.Values) || len(x.Values) == 0 {
				t.Fatalf("series %q: %d times, %d values", x.Key, len(x.Times), len(x.Values))
			}
		}
	})
}

// noisySeries is a probe with 10% log-normal noise around 1 GiB/s.
func noisySeries(key string, runs int, seed uint64) Series {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := Series{Key: key}
	t0 := time.Unix(1_500_000_000, 0)
	for i := range runs {
		s.Times = append(s.Times, t0.Add(time.Duration(i)*24*time.Hour))
		s.Values = append(s.Values, 1024*math.Exp(0.1*rng.NormFloat64()))
	}
	return s
}

func testOptions() Options {
	return Options{
		Interval: 15 * time.Minute, EvaluationInterval: 5 * time.Minute,
		BaselineRuns: 10, Drops: []float64{0.5}, InjectRuns: 20, Trials: 10, OnsetAfter: 30, Seed: 1,
		PageSeverity: "critical", Unit: probe.UnitBytesPerSecond, Scale: 1 << 20,
		Current: shippedRules, Reference: referenceRules,
	}
}

// On a steady probe, both rule sets page on a halving and the shipped
// rules never page without one; the JSON holds the contract's keys.
func TestReplayOfASteadyProbe(t *testing.T) {
	r, err := Run(context.Background(), []Series{noisySeries("lab/scratch/seq/read", 200, 7)}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	s := r.Series[0]
	if s.Runs != 200 || s.Current.PageFiringFraction != 0 || s.Current.PageEpisodesPerMonth != 0 {
		t.Errorf("shipped rules on an unmodified steady series: %+v", s.Current)
	}
	for name, f := range map[string]Figures{RuleSetCurrent: s.Current, RuleSetReference: s.Reference} {
		d := f.Detect["0.5"]
		if d.NewPageWithin10 < 0.9 || d.MedianDelayRuns == nil {
			t.Errorf("%s rules caught a halving of a steady probe within 10 runs in %.0f%% of trials: %+v", name, 100*d.NewPageWithin10, d)
		}
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	summary := doc["summary"].(map[string]any)
	for _, set := range []string{"current", "reference"} {
		sum := summary[set].(map[string]any)
		for _, k := range []string{"page_firing_fraction_median", "page_firing_fraction_p80", "page_episodes_per_month_p80", "warning_firing_fraction_median"} {
			if _, ok := sum[k]; !ok {
				t.Errorf("summary.%s has no %s: %v", set, k, sum)
			}
		}
		d := sum["detect"].(map[string]any)["0.5"].(map[string]any)
		for _, k := range []string{"new_page_within_3_median", "new_page_within_10_p80", "median_delay_runs_median"} {
			if _, ok := d[k]; !ok {
				t.Errorf("summary.%s.detect.0.5 has no %s: %v", set, k, d)
			}
		}
	}
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
}

// The same rules as both sets give the same figures: the trials are drawn
// once and the replay has no state across rule sets.
func TestReplayIsDeterministic(t *testing.T) {
	o := testOptions()
	o.Reference = o.Current
	series := []Series{noisySeries("a/read", 150, 1), noisySeries("b/write", 120, 2)}
	r1, err := Run(context.Background(), series, o)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Run(context.Background(), series, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r1.Series {
		a, _ := json.Marshal(r1.Series[i].Current)
		b, _ := json.Marshal(r1.Series[i].Reference)
		c, _ := json.Marshal(r2.Series[i].Current)
		if string(a) != string(b) || string(a) != string(c) {
			t.Errorf("series %s: current %s, reference %s, again %s", r1.Series[i].Key, a, b, c)
		}
	}
}

func TestReplayRejectsBadOptions(t *testing.T) {
	o := testOptions()
	o.Drops = []float64{1.5}
	if _, err := Run(context.Background(), []Series{noisySeries("a", 100, 1)}, o); err == nil || !strings.Contains(err.Error(), "--inject-drops") {
		t.Errorf("drop 1.5: %v", err)
	}
	o = testOptions()
	if _, err := Run(context.Background(), []Series{noisySeries("a", 20, 1)}, o); err == nil || !strings.Contains(err.Error(), "fewer than") {
		t.Errorf("a series too short for any trial: %v", err)
	}
}
