package statuspage

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/chart"
)

// The chart of an op's last runs is small enough to sit in a table row:
// each run a dot, oldest left, the plateau a dashed line with the warning
// and critical zones shaded below it, the last run coloured by its
// verdict. It is geometry only: the template draws it, so every piece of
// text in it (target and probe names) goes through html/template's
// escaping like the rest of the page, never through a hand-written SVG
// string.
const (
	chartWidth  = 240
	chartHeight = 64
	// Room for the last run's dot, which is larger, at either edge.
	chartLeft   = 5
	chartRight  = 5
	chartTop    = 14 // room for the caption
	chartBottom = 3
	plotWidth   = chartWidth - chartLeft - chartRight
	plotHeight  = chartHeight - chartTop - chartBottom
)

// sparkline is what the "chart" template draws; coordinates are formatted.
type sparkline struct {
	Width, Height int
	// FrameWidth and FrameHeight are the frame's, inside the edges.
	FrameWidth, FrameHeight int
	// Label names the chart for a screen reader and a tooltip; Caption
	// is its visible text.
	Label, Caption string
	// Points is the polyline through the runs, Dots the runs.
	Points string
	Dots   []dot
	// HasPlateau is set when the op has a plateau in the history's unit.
	HasPlateau             bool
	PlateauY, WarnY, CritY string
	WarnHeight, CritHeight string
	PlateauLabel           string
	// The plot area's edges and width.
	PlotLeft, PlotRight, PlotBottom, PlotWidth string
	// Empty is set before the first successful run.
	Empty bool
}

type dot struct {
	X, Y, R string
	// Class colours the dot: the last one by its verdict.
	Class string
	Title string
}

// chartOf lays out the chart of one op of a probe of a target.
func chartOf(t TargetStatus, p ProbeStatus, o OpStatus) sparkline {
	c := sparkline{
		Width: chartWidth, Height: chartHeight, FrameWidth: chartWidth - 1, FrameHeight: chartHeight - 1,
		Label:    fmt.Sprintf("%s/%s %s: last %d runs", t.Name, p.Name, o.Op, len(o.History)),
		Caption:  fmt.Sprintf("%s/%s %s", t.Name, p.Name, o.Op),
		PlotLeft: coord(chartLeft), PlotRight: coord(chartLeft + plotWidth), PlotBottom: coord(chartTop + plotHeight), PlotWidth: coord(plotWidth),
		Empty: len(o.History) == 0,
	}
	plateauV := 0.0
	// The history is in the kind's unit; a hand-written baseline in
	// another is not drawn on the same axis.
	if o.Baseline != nil && o.Unit == o.HistoryUnit {
		plateauV = *o.Baseline
	}
	top := plateauV
	for _, v := range o.History {
		if chart.Finite(v) && v > top {
			top = v
		}
	}
	top *= 1.15
	if !(top > 0) || !chart.Finite(top) {
		top = 1
	}
	y := func(v float64) float64 {
		return chartTop + plotHeight - plotHeight*math.Max(0, math.Min(v/top, 1))
	}
	n := len(o.History)
	x := func(i int) float64 {
		if n <= 1 {
			return chartLeft + plotWidth/2
		}
		return chartLeft + plotWidth*float64(i)/float64(n-1)
	}
	if plateauV > 0 {
		c.HasPlateau = true
		py, wy, cy := y(plateauV), y(plateauV*t.WarningRatio), y(plateauV*t.CriticalRatio)
		c.PlateauY, c.WarnY, c.CritY = coord(py), coord(wy), coord(cy)
		c.WarnHeight, c.CritHeight = coord(math.Max(0, cy-wy)), coord(math.Max(0, chartTop+plotHeight-cy))
		c.PlateauLabel = "plateau " + chart.FormatRate(plateauV, o.HistoryUnit)
	}
	var pts []string
	for i, v := range o.History {
		if !chart.Finite(v) {
			continue
		}
		d := dot{X: coord(x(i)), Y: coord(y(v)), R: "1.8", Class: "run",
			Title: fmt.Sprintf("run %d of %d: %s", i+1, n, chart.FormatRate(v, o.HistoryUnit))}
		if i == n-1 {
			d.R, d.Class = "3.2", "last "+verdictClass(o.Verdict)
		}
		pts = append(pts, d.X+","+d.Y)
		c.Dots = append(c.Dots, d)
	}
	c.Points = strings.Join(pts, " ")
	return c
}

func coord(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// verdictClass is the CSS class of a verdict; the names are the page's
// own, so that nothing from a result can inject a class.
func verdictClass(v string) string {
	switch v {
	case "ok", "warning", "critical", "failed", "no-baseline", "skipped":
		return "v-" + v
	}
	return "v-none"
}

// formatRatePtr is formatRate of a value that may be absent.
func formatRatePtr(v *float64, unit string) string {
	if v == nil {
		return "–"
	}
	return chart.FormatRate(*v, unit)
}

// formatRatio prints a ratio to two decimals, as the probe command does.
func formatRatio(v *float64) string {
	if v == nil {
		return "–"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

// formatWhen prints a time in UTC with how long ago or ahead of now it is.
func formatWhen(t *time.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	d := t.Sub(now).Round(time.Second)
	rel := "now"
	switch {
	case d < 0:
		rel = (-d).String() + " ago"
	case d > 0:
		rel = "in " + d.String()
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + rel + ")"
}

// formatSeconds prints a duration in seconds the way Go prints durations.
func formatSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}
