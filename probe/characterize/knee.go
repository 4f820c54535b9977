package characterize

import (
	"math"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// KneeGain is the gain under which a doubling of workers no longer pays:
// the published characterizations call a curve flat from the first doubling
// that adds less than 5%.
const KneeGain = 0.05

// FindKnee returns the index of the step of a doubling sweep (workers 1, 2,
// 4, ...) where the plateau starts, or -1 when the curve is still rising at
// its last step.
//
// The contract is "the first doubling that gains under KneeGain; the knee
// is the earlier step of that pair". Taken literally on measured data, one
// noisy step fakes a knee in the middle of a rise, and one lucky step after
// the plateau hides it. So the rule is applied to a cleaned curve, and a
// candidate must hold for the rest of the sweep:
//
//   - The curve is first smoothed with Tukey's running median of 3 (end
//     points by his extrapolation rule). A median of 3 leaves a monotone
//     curve exactly as it is, so the shoulder does not move, but it removes
//     a single spike or dip.
//   - The gain of step i+1 is taken over the best smoothed value up to i,
//     not over step i alone, so that a low draw at i does not make the next
//     step look like a gain.
//   - Step i is the knee when that gain is under KneeGain and the median of
//     all later smoothed steps is also under it. A pause in a rise that
//     resumes therefore is no knee, nor is one step of a slow rise of a few
//     percent per doubling that adds up past 5%; the median rather than the
//     maximum of the later steps lets a plateau wander within its noise.
//
// Noise as large as KneeGain itself cannot be told from a slow rise, and
// moves the knee by a step or two; the sustained value, a median over the
// plateau, hardly changes. On a clean curve that does not rise again after
// its first flat doubling this is exactly the literal rule, and a peak
// followed by a decline has its knee at the peak. Values that are not
// finite or are negative count as 0 (a step that measured nothing).
func FindKnee(values []float64) int {
	s := smooth3(values)
	best := 0.0
	for i := 0; i+1 < len(s); i++ {
		best = math.Max(best, s[i])
		if best <= 0 {
			continue
		}
		limit := (1 + KneeGain) * best
		if s[i+1] < limit && plateau.Median(s[i+1:]) < limit {
			return i
		}
	}
	return -1
}

// smooth3 is Tukey's running median of three with his end-point rule:
// each end becomes the median of itself, its neighbour's smoothed value and
// the straight-line extrapolation from the two smoothed values next to it.
func smooth3(values []float64) []float64 {
	v := make([]float64, len(values))
	for i, x := range values {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			x = 0
		}
		v[i] = x
	}
	n := len(v)
	if n < 3 {
		return v
	}
	s := make([]float64, n)
	for i := 1; i < n-1; i++ {
		s[i] = median3(v[i-1], v[i], v[i+1])
	}
	if n == 3 {
		// One interior point gives no slope to extrapolate from; the ends
		// are kept.
		s[0], s[2] = v[0], v[2]
		return s
	}
	s[0] = median3(v[0], s[1], math.Max(0, 3*s[1]-2*s[2]))
	s[n-1] = median3(v[n-1], s[n-2], math.Max(0, 3*s[n-2]-2*s[n-3]))
	return s
}

func median3(a, b, c float64) float64 {
	return math.Max(math.Min(a, b), math.Min(math.Max(a, b), c))
}

// Sustained is the value the plateau holds: the median of the steps from
// the knee on, or the last step when there is no knee (the curve was still
// rising, so the last step is the best sustained value seen).
func Sustained(values []float64, knee int) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	if knee < 0 || knee >= len(values) {
		return values[len(values)-1]
	}
	return plateau.Median(values[knee:])
}
