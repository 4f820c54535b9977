package plateau

import (
	"math"
	"sort"
)

// Median of values; NaN for none. An even count gives the mean of the two
// middle values.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), values...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread is the relative spread of runs around their median,
// (max - min) / (2 * median), as the baselines file documents it: 0.05
// means the runs lay within about ±5% of the median. 0 when the median is
// not positive.
func Spread(values []float64) float64 {
	m := Median(values)
	if len(values) == 0 || !(m > 0) {
		return 0
	}
	lo, hi := values[0], values[0]
	for _, v := range values[1:] {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return (hi - lo) / (2 * m)
}

// RobustSpread is the runs' spread as a fraction of their median, from the
// median absolute deviation: 1.4826 x MAD / median, which estimates the
// coefficient of variation of normally distributed runs and, unlike the
// range (Spread), is not moved by one run that met a burst of other work.
// 0 for fewer than two runs or a median that is not positive.
func RobustSpread(values []float64) float64 {
	m := Median(values)
	if len(values) < 2 || !(m > 0) {
		return 0
	}
	dev := make([]float64, len(values))
	for i, v := range values {
		dev[i] = math.Abs(v - m)
	}
	return 1.4826 * Median(dev) / m
}

// StableSpread is the most RobustSpread a baseline may have for a verdict
// at the given warning ratio: half the distance from the plateau to the
// warning ratio (0.10 at the default 0.8). The warning ratio is then two
// standard deviations of one run below the median, so an unchanged node
// crosses it on about 2% of single runs, and on a run and its
// confirmation (probe re-runs a failing probe once) about 1 in 2,000.
func StableSpread(warningRatio float64) float64 {
	if !(warningRatio > 0 && warningRatio < 1) {
		return 0.10
	}
	return (1 - warningRatio) / 2
}
