// Package chart holds what every chart of the project shares: the unit a
// rate is shown in and its one formatter, the y axis from zero to a round
// value with its ticks, the palette, and SVG text escaping; and the runs
// chart the backtest draws. The characterize sweep curves, the backtest
// SVG and the status page's sparklines all draw with it. The SVG is
// written by hand, as a few dozen elements, so that it needs no library
// and opens in any browser; a plotting library (gonum's plot) would bring
// fonts, a canvas abstraction and a dependency tree larger than the
// charts, and could not hand the status page its geometry to draw through
// html/template.
package chart

import (
	"encoding/xml"
	"math"
	"strconv"
	"strings"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// Finite reports whether v is neither NaN nor infinite: a run that failed
// is NaN and is left out of every chart.
func Finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Unit is how a chart shows values of a rate: divided by Div, labelled
// Name.
type Unit struct {
	Div  float64
	Name string
}

// UnitFor is the largest unit in which |v| is at least 1: binary prefixes
// for bytes, as block and file sizes are given, decimal ones for
// operations.
func UnitFor(unit string, v float64) Unit {
	units := []Unit{{1e6, "M ops/s"}, {1e3, "K ops/s"}, {1, "ops/s"}}
	if unit == probe.UnitBytesPerSecond {
		units = []Unit{{1 << 30, "GiB/s"}, {1 << 20, "MiB/s"}, {1 << 10, "KiB/s"}, {1, "B/s"}}
	}
	for _, u := range units {
		if math.Abs(v) >= u.Div {
			return u
		}
	}
	return units[len(units)-1]
}

// FormatRate writes a rate with three significant digits in the unit that
// suits it, never in exponent form: "1.23 GiB/s", "1000 B/s", "-" for a
// value that is not finite. The ops of a metadata sweep share an axis
// although their rates differ by orders of magnitude, so each label picks
// its own unit.
func FormatRate(v float64, unit string) string {
	if !Finite(v) {
		return "-"
	}
	u := UnitFor(unit, v)
	return FormatNumber(v/u.Div) + " " + u.Name
}

// FormatNumber writes v with three significant digits and no trailing
// zeros, never in exponent form.
func FormatNumber(v float64) string { return trimFloat(round3(v)) }

// Axis is a y axis from 0 to Max, in Unit, with a tick every Step; Max and
// Step are in the unit's numbers (Max 2.5 with Unit GiB/s is 2.5 GiB/s).
type Axis struct {
	Unit      Unit
	Step, Max float64
}

// NewAxis is the axis that shows values up to top: the unit of top, and a
// tick step of 1, 2, 2.5 or 5 times a power of ten that cuts it into at
// most about five intervals.
func NewAxis(unit string, top float64) Axis {
	u := UnitFor(unit, top)
	step := NiceStep(top / u.Div)
	limit := step * math.Max(1, math.Ceil(top/u.Div/step))
	if !Finite(limit) || limit <= 0 {
		limit, step = 1, 0.2
	}
	return Axis{Unit: u, Step: step, Max: limit}
}

// Fraction is where v (in the rate's own unit) lies between 0 and the
// axis's top, clamped to [0, 1].
func (a Axis) Fraction(v float64) float64 {
	return math.Max(0, math.Min(v/a.Unit.Div/a.Max, 1))
}

// Ticks are the tick values, in the unit's numbers, from 0 to Max.
func (a Axis) Ticks() []float64 {
	var out []float64
	for i := 0; i <= 50; i++ {
		v := float64(i) * a.Step
		if v > a.Max*(1+1e-9) {
			break
		}
		out = append(out, roundTick(v, a.Step))
	}
	return out
}

// Label writes a tick value without float noise or trailing zeros.
func (a Axis) Label(v float64) string { return trimFloat(roundTick(v, a.Step)) }

// NiceStep is a tick step of 1, 2, 2.5 or 5 times a power of ten that
// cuts top into at most about five intervals.
func NiceStep(top float64) float64 {
	if !(top > 0) || math.IsInf(top, 0) {
		return 1
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// Color is the i-th colour of a palette that stays distinguishable for
// the common forms of colour blindness (Okabe and Ito's); metadata has
// the most ops, four.
func Color(i int) string {
	palette := [...]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"}
	return palette[((i%len(palette))+len(palette))%len(palette)]
}

// Escape escapes s for XML character data and for a double-quoted
// attribute value (EscapeText escapes quotes too).
func Escape(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s))
	return sb.String()
}

// trimFloat prints a label without trailing zeros.
func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// round3 keeps three significant digits for labels.
func round3(v float64) float64 {
	if !Finite(v) || v == 0 {
		return v
	}
	p, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	if err != nil {
		return v
	}
	return p
}

// roundTick removes the float error of i*step (0.30000000000000004).
func roundTick(v, step float64) float64 {
	if step <= 0 || !Finite(v) {
		return v
	}
	digits := max(0, -int(math.Floor(math.Log10(step)))+2)
	p, err := strconv.ParseFloat(strconv.FormatFloat(v, 'f', digits, 64), 64)
	if err != nil {
		return v
	}
	return p
}
