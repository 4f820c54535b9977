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
