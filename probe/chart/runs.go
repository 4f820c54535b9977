package chart

import (
	"fmt"
	"math"
	"strings"
)

// RunsChart draws one probe series run by run, in the style of the sweep
// charts: each run's value as a dot, the plateau as a dashed line, and spans
// of time (alert episodes) as shaded bands, one row of bands per name.
type RunsChart struct {
	Title string
	Unit  string
	// Values are the runs, one per x step; Plateau is drawn across.
	Values  []float64
	Plateau float64
	// Bands maps a name (a rule set) to [start, end) spans in runs.
	Bands     map[string][][2]float64
	BandOrder []string
}

// SVG renders the chart.
func (c RunsChart) SVG() []byte {
	const width, height, left, right, top, bottom = 960.0, 420.0, 80.0, 20.0, 40.0, 70.0
	plotW, plotH := width-left-right, height-top-bottom
	hi := c.Plateau
	for _, v := range c.Values {
		if Finite(v) && v > hi {
			hi = v
		}
	}
	axis := NewAxis(c.Unit, hi)
	u := axis.Unit
	topV := axis.Max * u.Div
	n := max(1, len(c.Values))
	x := func(run float64) float64 { return left + plotW*run/float64(n) }
	y := func(v float64) float64 { return top + plotH*(1-v/topV) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="20" font-size="14">%s</text>`+"\n", left, Escape(c.Title))
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd"}
	for i, name := range c.BandOrder {
		color := colors[i%len(colors)]
		for _, s := range c.Bands[name] {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.18"/>`+"\n",
				x(s[0]), top, math.Max(1, x(s[1])-x(s[0])), plotH, color)
		}
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s" fill-opacity="0.4"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			left+float64(i)*220, height-22, color, left+float64(i)*220+16, height-12, Escape(name))
	}
	for _, v := range axis.Ticks() {
		yy := y(v * u.Div)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, width-right, yy, yy, left-6, yy+4, axis.Label(v))
	}
	fmt.Fprintf(&b, `<text x="14" y="%.0f" transform="rotate(-90 14 %.0f)" text-anchor="middle">%s</text>`+"\n", top+plotH/2, top+plotH/2, u.Name)
	xstep := NiceStep(float64(n))
	for r := 0.0; r <= float64(n); r += xstep {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(r), top+plotH+16, trimFloat(r))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">run</text>`+"\n", left+plotW/2, top+plotH+32)
	for i, v := range c.Values {
		if Finite(v) {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="1.6" fill="#333" fill-opacity="0.6"/>`+"\n", x(float64(i)+0.5), y(v))
		}
	}
	if c.Plateau > 0 {
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ff7f0e" stroke-width="2" stroke-dasharray="6 4"/><text x="%.0f" y="%.1f" fill="#ff7f0e" text-anchor="end">plateau %s</text>`+"\n",
			left, width-right, y(c.Plateau), y(c.Plateau), width-right, y(c.Plateau)-5, Escape(FormatRate(c.Plateau, c.Unit)))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}
