package characterize

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// svgDoc is what a test needs to know of a chart: every element by name
// with its attributes, and every text.
type svgDoc struct {
	elements map[string][]map[string]string
	texts    []string
	title    string
}

// parseSVG decodes the chart as XML, failing on anything that is not
// well-formed.
func parseSVG(t testing.TB, data []byte) svgDoc {
	t.Helper()
	doc := svgDoc{elements: map[string][]map[string]string{}}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var stack []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, data)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 && (el.Name.Local != "svg" || el.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg in the SVG namespace", el.Name)
			}
			attrs := map[string]string{}
			for _, a := range el.Attr {
				attrs[a.Name.Local] = a.Value
			}
			doc.elements[el.Name.Local] = append(doc.elements[el.Name.Local], attrs)
			stack = append(stack, el.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && strings.TrimSpace(string(el)) != "" {
				switch stack[len(stack)-1] {
				case "text":
					doc.texts = append(doc.texts, string(el))
				case "title":
					if len(stack) == 2 {
						doc.title = string(el)
					}
				}
			}
		}
	}
	return doc
}

func (d svgDoc) hasText(s string) bool {
	for _, t := range d.texts {
		if t == s {
			return true
		}
	}
	return false
}

func referenceChartSweep() *Sweep {
	return referenceSweep(map[string][]float64{
		"write": scaled(shapeFastRiseFlat, 1e9),
		"read":  scaled(shapePeakDecline, 1e9),
	}, []string{"write", "read"}, probe.UnitBytesPerSecond)
}

func TestSweepSVGDrawsEveryOpAndTheKnees(t *testing.T) {
	sw := referenceChartSweep()
	doc := parseSVG(t, sw.SVG())
	if doc.title != "scratch/seq: sequential sweep of workers" {
		t.Errorf("title %q", doc.title)
	}
	if n := len(doc.elements["polyline"]); n != 2 {
		t.Errorf("%d polylines, want one per op", n)
	}
	for _, pl := range doc.elements["polyline"] {
		if pts := strings.Fields(pl["points"]); len(pts) != len(sw.Steps) {
			t.Errorf("polyline through %d points, want one per step (%d)", len(pts), len(sw.Steps))
		}
	}
	// A dot per run and a marker per median.
	if n, want := len(doc.elements["circle"]), 2*len(sw.Steps)*(3+1); n != want {
		t.Errorf("%d circles, want %d", n, want)
	}
	// Knees: 16 workers for read, 64 for write, as dashed lines.
	for _, label := range []string{"knee (read): workers=16", "knee (write): workers=64"} {
		if !doc.hasText(label) {
			t.Errorf("no knee label %q in %q", label, doc.texts)
		}
	}
	dashed := 0
	for _, l := range doc.elements["line"] {
		if l["stroke-dasharray"] == "6 4" {
			dashed++
		}
	}
	if dashed != 2 {
		t.Errorf("%d dashed knee lines, want 2", dashed)
	}
	// x ticks at each level on a log2 scale: equal distances.
	for _, l := range []string{"1", "2", "4", "1024", "workers (log2 scale)", "throughput (GiB/s)", "write", "read"} {
		if !doc.hasText(l) {
			t.Errorf("no text %q", l)
		}
	}
	var xs []float64
	for _, tx := range doc.elements["text"] {
		if tx["text-anchor"] == "" && tx["y"] == strconv.Itoa(chartTop+plotHeight+18) {
			x, _ := strconv.ParseFloat(tx["x"], 64)
			xs = append(xs, x)
		}
	}
	if len(xs) != len(sw.Steps) {
		t.Fatalf("%d x tick labels, want %d", len(xs), len(sw.Steps))
	}
	for i := 2; i < len(xs); i++ {
		if d0, d := xs[1]-xs[0], xs[i]-xs[i-1]; math.Abs(d-d0) > 0.2 {
			t.Errorf("x ticks not evenly spaced (log2 scale): %v", xs)
			break
		}
	}
	// y from 0 to a nice value above the highest run (24.8e9*1.01 B/s is
	// 23.3 GiB/s): ticks 0, 5, ... 25 GiB/s.
	for _, l := range []string{"0", "5", "10", "25"} {
		if !doc.hasText(l) {
			t.Errorf("no y tick %q in %q", l, doc.texts)
		}
	}
	if !doc.hasText("still rising at workers=1024") && !doc.hasText("knee at workers=64") {
		t.Errorf("legend does not give the knee: %q", doc.texts)
	}
	if !doc.hasText("max 23.1 GiB/s at 16") {
		t.Errorf("legend does not give read's maximum (24.8e9 B/s = 23.1 GiB/s at 16): %q", doc.texts)
	}
}

func TestSweepSVGEscapesNamesAndSurvivesEdgeCases(t *testing.T) {
	sw := referenceChartSweep()
	sw.Target, sw.Params = `a<b&"c"`, "sequential ]]> </svg>"
	doc := parseSVG(t, sw.SVG())
	if doc.title != `a<b&"c"/seq: sequential sweep of workers` {
		t.Errorf("title %q", doc.title)
	}
	empty := &Sweep{Target: "t", Probe: "p", Kind: probe.KindMetadata, Variable: VariableWorkers, Unit: probe.UnitOpsPerSecond, Ops: probe.OpsOf(probe.KindMetadata)}
	parseSVG(t, empty.SVG())
	one := &Sweep{Target: "t", Probe: "p", Kind: probe.KindRandom, Variable: VariableQueueDepth, Unit: probe.UnitOpsPerSecond, Ops: []string{"read", "write"},
		Steps: []SweepStep{{Level: 1, Values: map[string][]float64{"read": {0, 0}, "write": {math.NaN(), math.Inf(1)}}}}}
	doc = parseSVG(t, one.SVG())
	if !doc.hasText("queue depth (log2 scale)") || !doc.hasText("rate (ops/s)") {
		t.Errorf("random sweep axis labels: %q", doc.texts)
	}
}

func TestSweepCSVHasEveryRunAndTheMedians(t *testing.T) {
	sw := referenceChartSweep()
	var buf bytes.Buffer
	if err := sw.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows[0], ",") != "target,probe,kind,variable,level,op,run,value,unit" {
		t.Errorf("header %v", rows[0])
	}
	if n, want := len(rows)-1, len(sw.Steps)*2*(3+1); n != want {
		t.Fatalf("%d rows, want %d", n, want)
	}
	medians := 0
	for _, r := range rows[1:] {
		level, _ := strconv.Atoi(r[4])
		v, err := strconv.ParseFloat(r[7], 64)
		if err != nil {
			t.Fatalf("row %v: %v", r, err)
		}
		st := sw.Steps[int(math.Log2(float64(level)))]
		var want float64
		if r[6] == "median" {
			medians++
			want = st.Median(r[5])
		} else {
			i, _ := strconv.Atoi(r[6])
			want = st.Values[r[5]][i-1]
		}
		if math.Abs(v/want-1) > 1e-5 || r[0] != "scratch" || r[3] != "workers" || r[8] != probe.UnitBytesPerSecond {
			t.Errorf("row %v, want value %g", r, want)
		}
	}
	if medians != len(sw.Steps)*2 {
		t.Errorf("%d median rows, want one per step and op", medians)
	}
}

func TestSweepWriteFiles(t *testing.T) {
	dir := t.TempDir()
	sw := referenceChartSweep()
	svgPath, csvPath, err := sw.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if svgPath != filepath.Join(dir, "scratch_seq_sweep.svg") || csvPath != filepath.Join(dir, "scratch_seq_sweep.csv") {
		t.Errorf("paths %s %s", svgPath, csvPath)
	}
	data, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	parseSVG(t, data)
	if _, _, err := sw.WriteFiles(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "write sweep chart") {
		t.Errorf("writing into a missing directory: %v", err)
	}
}

// FuzzSweepChart draws sweeps of any names and values: the SVG must stay
// well-formed XML and the CSV must read back with one row per run and
// median.
func FuzzSweepChart(f *testing.F) {
	var seed bytes.Buffer
	for _, v := range append(scaled(shapeFastRiseFlat, 1e9), scaled(shapePeakDecline, 1e9)...) {
		seed.WriteString(strconv.FormatFloat(v, 'g', -1, 64) + " ")
	}
	f.Add("scratch", "seq", "write", uint8(3), seed.String())
	f.Add(`a<b&"c"`, "]]>", "\x00\xff", uint8(1), "NaN +Inf -1 0 1e308")
	f.Fuzz(func(t *testing.T, target, probeName, op string, runs uint8, values string) {
		fields := strings.Fields(values)
		if len(fields) > 64 {
			fields = fields[:64]
		}
		n := int(runs%4) + 1
		other := "other"
		if op == other {
			other += "2"
		}
		sw := &Sweep{Target: target, Probe: probeName, Kind: probe.KindSequential, Params: values, Variable: VariableWorkers,
			Unit: probe.UnitBytesPerSecond, Ops: []string{op, other}, Runs: n}
		for i := 0; i*n < len(fields); i++ {
			st := SweepStep{Level: 1 << min(i, 30), Values: map[string][]float64{}}
			for _, s := range fields[i*n : min(len(fields), (i+1)*n)] {
				v, _ := strconv.ParseFloat(s, 64)
				st.Values[op] = append(st.Values[op], v)
				st.Values[other] = append(st.Values[other], v/2)
			}
			sw.Steps = append(sw.Steps, st)
		}
		parseSVG(t, sw.SVG())
		var buf bytes.Buffer
		if err := sw.WriteCSV(&buf); err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(&buf).ReadAll()
		if err != nil {
			t.Fatalf("CSV does not read back: %v", err)
		}
		want := 1
		for _, st := range sw.Steps {
			for _, o := range sw.Ops {
				if k := len(st.Values[o]); k > 0 {
					want += k + 1
				}
			}
		}
		if len(rows) != want {
			t.Fatalf("%d CSV rows, want %d", len(rows), want)
		}
	})
}
