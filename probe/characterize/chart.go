package characterize

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/chart"
)

// A sweep is kept as data (CSV) and drawn as a chart (SVG) in the style of
// the published characterizations: concurrency doubling along a log2
// x-axis, one line per op, the knee marked; the axis, units and palette
// are probe/chart's, as every chart's are.

// WriteCSV writes every run of the sweep, one row each, followed by each
// step's median as a row whose run column says "median":
//
//	target,probe,kind,variable,level,op,run,value,unit
//	scratch,seq,sequential,workers,4,write,2,1.234e+09,bytes_per_second
//	scratch,seq,sequential,workers,4,write,median,1.201e+09,bytes_per_second
//
// variable is workers, or queue_depth for the random probe, which has no
// workers; level is its value at that step.
func (s *Sweep) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"target", "probe", "kind", "variable", "level", "op", "run", "value", "unit"})
	row := func(st SweepStep, op, run string, v float64) {
		_ = cw.Write([]string{s.Target, s.Probe, s.Kind, s.Variable, strconv.Itoa(st.Level), op, run, strconv.FormatFloat(v, 'g', 6, 64), s.Unit})
	}
	for _, st := range s.Steps {
		for _, op := range s.Ops {
			for i, v := range st.Values[op] {
				row(st, op, strconv.Itoa(i+1), v)
			}
			if len(st.Values[op]) > 0 {
				row(st, op, "median", st.Median(op))
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write sweep CSV: %w", err)
	}
	return nil
}

// WriteFiles writes the sweep's chart and data into dir as
// <target>_<probe>_sweep.svg and .csv and returns their paths. Target and
// probe names are restricted by the config to characters safe in a file
// name.
func (s *Sweep) WriteFiles(dir string) (svgPath, csvPath string, err error) {
	base := filepath.Join(dir, s.Target+"_"+s.Probe+"_sweep")
	svgPath, csvPath = base+".svg", base+".csv"
	if err := os.WriteFile(svgPath, s.SVG(), 0o644); err != nil {
		return "", "", fmt.Errorf("write sweep chart: %w", err)
	}
	var sb strings.Builder
	if err := s.WriteCSV(&sb); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(csvPath, []byte(sb.String()), 0o644); err != nil {
		return "", "", fmt.Errorf("write sweep data: %w", err)
	}
	return svgPath, csvPath, nil
}

// Chart geometry, in SVG user units (pixels at 100%).
const (
	chartWidth   = 960
	chartHeight  = 560
	chartLeft    = 90
	chartRight   = 250 // room for the legend
	chartTop     = 86
	chartBottom  = 70
	plotWidth    = chartWidth - chartLeft - chartRight
	plotHeight   = chartHeight - chartTop - chartBottom
	legendX      = chartLeft + plotWidth + 24
	chartFont    = "DejaVu Sans, Liberation Sans, Arial, sans-serif"
	chartGridCol = "#dddddd"
)

// SVG draws the sweep: one line per op through the step medians, each
// run's value as a faint dot, y from 0, x on a log2 scale of the levels,
// and each knee as a dashed vertical line with the ops whose plateau
// starts there and their sustained value as a dotted line from it.
func (s *Sweep) SVG() []byte {
	var b strings.Builder
	summary := s.Summary()
	levels := s.Levels()

	// y range: from 0 to a nice value above every run, medians included.
	top := 0.0
	for _, st := range s.Steps {
		for _, op := range s.Ops {
			for _, v := range st.Values[op] {
				if chart.Finite(v) && v > top {
					top = v
				}
			}
		}
	}
	axis := chart.NewAxis(s.Unit, top)
	au := axis.Unit
	y := func(v float64) float64 {
		return chartTop + plotHeight - plotHeight*axis.Fraction(v)
	}
	// x: log2 of the level, the first level at the left edge.
	lo, hi := 0.0, 0.0
	if len(levels) > 0 {
		lo, hi = math.Log2(float64(max(1, levels[0]))), math.Log2(float64(max(1, levels[len(levels)-1])))
	}
	x := func(level int) float64 {
		if hi <= lo {
			return chartLeft + plotWidth/2
		}
		return chartLeft + plotWidth*(math.Log2(float64(max(1, level)))-lo)/(hi-lo)
	}

	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="13">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight, chartFont)
	variableLabel := "workers"
	if s.Variable == VariableQueueDepth {
		variableLabel = "queue depth"
	}
	title := fmt.Sprintf("%s/%s: %s sweep of %s", s.Target, s.Probe, s.Kind, variableLabel)
	fmt.Fprintf(&b, "<title>%s</title>\n", chart.Escape(title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, chartHeight)
	fmt.Fprintf(&b, `<text x="%d" y="30" font-size="18" font-weight="bold">%s</text>`+"\n", chartLeft, chart.Escape(title))
	sub := fmt.Sprintf("configured: %s · median of %d runs per step", s.Params, s.Runs)
	if s.Host != "" {
		sub += " · " + s.Host
	}
	if !s.At.IsZero() {
		sub += " · " + s.At.Format("2006-01-02 15:04 MST")
	}
	fmt.Fprintf(&b, `<text x="%d" y="52" font-size="12" fill="#444444">%s</text>`+"\n", chartLeft, chart.Escape(sub))

	// Grid and y ticks.
	b.WriteString(`<g class="y-axis" font-size="12" text-anchor="end">` + "\n")
	for _, v := range axis.Ticks() {
		yy := chartTop + plotHeight - plotHeight*v/axis.Max
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", chartLeft, yy, chartLeft+plotWidth, yy, chartGridCol)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", chartLeft-8, yy+4, chart.Escape(axis.Label(v)))
	}
	b.WriteString("</g>\n")
	yLabel := "throughput (" + au.Name + ")"
	if s.Unit != probe.UnitBytesPerSecond {
		yLabel = "rate (" + au.Name + ")"
	}
	fmt.Fprintf(&b, `<text transform="translate(24 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", chartTop+plotHeight/2, chart.Escape(yLabel))

	// x ticks at every level swept.
	b.WriteString(`<g class="x-axis" font-size="12" text-anchor="middle">` + "\n")
	for _, l := range levels {
		xx := x(l)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", xx, chartTop, xx, chartTop+plotHeight, chartGridCol)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%d</text>`+"\n", xx, chartTop+plotHeight+18, l)
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s (log2 scale)</text>`+"\n", chartLeft+plotWidth/2, chartHeight-22, chart.Escape(variableLabel))
	fmt.Fprintf(&b, `<path d="M%d %d V%d H%d" fill="none" stroke="#333333"/>`+"\n", chartLeft, chartTop, chartTop+plotHeight, chartLeft+plotWidth)

	// Knees: one dashed line per level, naming the ops whose plateau
	// starts there.
	kneeOps := map[int][]string{}
	for _, o := range summary {
		if o.Knee > 0 {
			kneeOps[o.Knee] = append(kneeOps[o.Knee], o.Op)
		}
	}
	kneeLevels := make([]int, 0, len(kneeOps))
	for l := range kneeOps {
		kneeLevels = append(kneeLevels, l)
	}
	sort.Ints(kneeLevels)
	for i, l := range kneeLevels {
		xx := x(l)
		fmt.Fprintf(&b, `<g class="knee"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555555" stroke-width="1.5" stroke-dasharray="6 4"/>`,
			xx, chartTop-6, xx, chartTop+plotHeight)
		anchor := "start"
		tx := xx + 5
		if xx > chartLeft+plotWidth*0.7 {
			anchor, tx = "end", xx-5
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="%s" fill="#333333">%s</text></g>`+"\n",
			tx, chartTop-10+14*(i%2), anchor, chart.Escape(fmt.Sprintf("knee (%s): %s=%d", strings.Join(kneeOps[l], ", "), s.Variable, l)))
	}

	// One series per op.
	for i, o := range summary {
		color := chart.Color(i)
		fmt.Fprintf(&b, `<g class="op" data-op="%s">`+"\n", chart.Escape(o.Op))
		for _, st := range s.Steps {
			for r, v := range st.Values[o.Op] {
				if !chart.Finite(v) {
					continue
				}
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s" fill-opacity="0.35"><title>%s</title></circle>`+"\n",
					x(st.Level), y(v), color, chart.Escape(fmt.Sprintf("%s %s=%d run %d: %s %s", o.Op, s.Variable, st.Level, r+1, chart.FormatNumber(v/au.Div), au.Name)))
			}
		}
		var pts []string
		for _, st := range s.Steps {
			if m := st.Median(o.Op); chart.Finite(m) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(st.Level), y(m)))
			}
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round"/>`+"\n", strings.Join(pts, " "), color)
		}
		for _, st := range s.Steps {
			if m := st.Median(o.Op); chart.Finite(m) {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s</title></circle>`+"\n", x(st.Level), y(m), color,
					chart.Escape(fmt.Sprintf("%s %s=%d median: %s %s", o.Op, s.Variable, st.Level, chart.FormatNumber(m/au.Div), au.Name)))
			}
		}
		if o.Knee > 0 && chart.Finite(o.Sustained) {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="2 3"/>`+"\n",
				x(o.Knee), y(o.Sustained), chartLeft+plotWidth, y(o.Sustained), color)
		}
		b.WriteString("</g>\n")
	}

	// Legend: each op with its maximum, sustained value and knee.
	b.WriteString(`<g class="legend">` + "\n")
	for i, o := range summary {
		color := chart.Color(i)
		ly := chartTop + 10 + 62*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`, legendX, ly, legendX+24, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", legendX+32, ly+4, chart.Escape(o.Op))
		knee := fmt.Sprintf("knee at %s=%d", s.Variable, o.Knee)
		if o.Knee == 0 && len(levels) > 0 {
			knee = fmt.Sprintf("still rising at %s=%d", s.Variable, levels[len(levels)-1])
		}
		for j, line := range []string{
			fmt.Sprintf("max %s at %d", chart.FormatRate(o.Max, s.Unit), o.MaxLevel),
			"sustained " + chart.FormatRate(o.Sustained, s.Unit),
			knee,
		} {
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#333333">%s</text>`+"\n", legendX+32, ly+20+14*j, chart.Escape(line))
		}
	}
	b.WriteString("</g>\n</svg>\n")
	return []byte(b.String())
}
