package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/backtestcli"
)

// The command's flags reach the replay: a CSV in MiB/s, the shipped and the
// reference rule files, the drops asked for, the JSON of the contract and
// an SVG of the series asked for.
func TestBacktestCommandWritesTheContractsJSON(t *testing.T) {
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "runs.csv")
	var b strings.Builder
	b.WriteString("system,file_system,app,op,start_unix,mib_per_second\n")
	for i := range 120 {
		v := 1000 * math.Exp(0.05*math.Sin(float64(i)))
		fmt.Fprintf(&b, "lab,scratch,ior,read,%d,%.3f\n", 1_500_000_000+i*86400, v)
	}
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	o := &backtestcli.Flags{
		Input: csvPath, SeriesColumns: "system,file_system,app,op", TimeColumn: "start_unix", ValueColumn: "mib_per_second",
		Unit: "bytes_per_second", Drops: "0.5", Output: "json", SVG: filepath.Join(dir, "series.svg"),
		Rules:          []string{filepath.Join(root, "dashboards", "rules.yml"), filepath.Join(root, "dashboards", "alerts.yml"), filepath.Join(root, "dashboards", "fleet_alerts.yml")},
		ReferenceRules: []string{filepath.Join(root, "dashboards", "testdata", "reference", "rules.yml"), filepath.Join(root, "dashboards", "testdata", "reference", "alerts.yml")},
		Interval:       15 * time.Minute, EvaluationInterval: 5 * time.Minute, BaselineRuns: 10, InjectRuns: 20, Trials: 5, OnsetAfter: 30, Seed: 1, PageSeverity: "critical",
	}
	var out bytes.Buffer
	if err := runBacktest(&out, o); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Series []struct {
			Key     string
			Runs    int
			Current struct {
				Detect map[string]struct {
					NewPageWithin10 float64 `json:"new_page_within_10"`
				}
			}
		}
		Summary map[string]map[string]any
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(doc.Series) != 1 || doc.Series[0].Key != "lab/scratch/ior/read" || doc.Series[0].Runs != 120 {
		t.Fatalf("series: %+v", doc.Series)
	}
	if d := doc.Series[0].Current.Detect["0.5"]; d.NewPageWithin10 < 0.8 {
		t.Errorf("a halving of a steady series paged within 10 runs in %.0f%% of trials", 100*d.NewPageWithin10)
	}
	if _, ok := doc.Summary["reference"]["page_firing_fraction_p80"]; !ok {
		t.Errorf("summary: %v", doc.Summary)
	}
	svg, err := os.ReadFile(o.SVG)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("lab/scratch/ior/read")) {
		t.Errorf("svg: %v %.200s", err, svg)
	}
	o.Drops = "0.5,x"
	if err := runBacktest(&out, o); err == nil || !strings.Contains(err.Error(), "--inject-drops") {
		t.Errorf("bad drop: %v", err)
	}
}
