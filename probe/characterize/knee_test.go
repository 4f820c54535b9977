package characterize

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Sweep shapes of the reference characterization (PixStor, GPFS 5.0.4),
// at threads 1, 2, 4 ... 1024, in its units.
var (
	sweepThreads = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

	// Sequential N-to-N write: rises fast and reaches 20.3 GB/s by 64
	// threads, then holds flat to 1024 (max 20.4, sustained 20.3).
	shapeFastRiseFlat = func() []float64 {
		v := make([]float64, len(sweepThreads))
		for i, t := range sweepThreads {
			v[i] = 20.4 * (1 - math.Exp(-float64(t)/12))
		}
		return v
	}()
	// Random 4 KiB read: grows almost linearly with threads to 25.6 K IOPS
	// at 64 threads; the sweep stops there, still rising.
	shapeLinear = []float64{0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6}
	// Sequential N-to-1 read: peaks at 16 threads (24.8 GB/s, bounded by
	// the storage nodes' links) and then declines slightly to 23.8.
	shapePeakDecline = []float64{3.1, 6.2, 12.4, 22.0, 24.8, 24.5, 24.2, 24.0, 23.9, 23.8, 23.8}
)

func TestFindKneeReferenceShapes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		values    []float64
		knee      int
		max       float64
		sustained float64
	}{
		// 32 -> 64 threads still gains 7%, 64 -> 128 under 1%.
		{"fast rise then flat", shapeFastRiseFlat, 6, 20.4, 20.4},
		{"linear growth", shapeLinear, -1, 25.6, 25.6},
		{"peak then slight decline", shapePeakDecline, 4, 24.8, 24.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			knee := FindKnee(tc.values)
			if knee != tc.knee {
				t.Fatalf("knee at index %d, want %d (values %v)", knee, tc.knee, tc.values)
			}
			if got := Sustained(tc.values, knee); math.Abs(got-tc.sustained) > 0.05 {
				t.Errorf("sustained %.2f, want %.2f", got, tc.sustained)
			}
			if got := maxOf(tc.values); math.Abs(got-tc.max) > 0.05 {
				t.Errorf("max %.2f, want %.2f", got, tc.max)
			}
		})
	}
}

// The literal rule of the contract holds on clean curves: the knee is the
// earlier step of the first doubling that gains under 5%.
func TestFindKneeLiteralRuleOnCleanCurves(t *testing.T) {
	for _, tc := range []struct {
		values []float64
		knee   int
	}{
		{[]float64{100, 104}, 0},
		{[]float64{100, 106}, -1},
		{[]float64{100, 200, 209}, 1},
		{[]float64{100, 200, 211}, -1},
		{[]float64{100, 200, 300, 310, 311}, 2},
		{[]float64{100, 90, 80}, 0},
		{[]float64{100}, -1},
		{nil, -1},
		{[]float64{0, 0, 0}, -1},
		// A failed first step measured nothing; the curve starts after it.
		{[]float64{0, 100, 102}, 1},
	} {
		if got := FindKnee(tc.values); got != tc.knee {
			t.Errorf("FindKnee(%v) = %d, want %d", tc.values, got, tc.knee)
		}
	}
}

// A single spike or dip must not move the knee: a lucky step late on the
// plateau would otherwise push it to the end, and a slow step in the rise
// would fake it early.
func TestFindKneeIgnoresSingleOutliers(t *testing.T) {
	spike := append([]float64(nil), shapeFastRiseFlat...)
	spike[9] *= 1.12
	if got := FindKnee(spike); got != 6 {
		t.Errorf("spike of 12%% at step 9: knee %d, want 6 (%v)", got, spike)
	}
	dip := append([]float64(nil), shapeFastRiseFlat...)
	dip[4] = dip[3] * 1.01 // 16 threads no faster than 8
	if got := FindKnee(dip); got != 6 {
		t.Errorf("dip at step 4: knee %d, want 6 (%v)", got, dip)
	}
	// A pause in a rise that resumes is no plateau.
	pause := []float64{10, 20, 20.5, 40, 80}
	if got := FindKnee(pause); got != -1 {
		t.Errorf("pause then rise %v: knee %d, want none", pause, got)
	}
}

// noisy returns each step as the median of runs draws with relative
// Gaussian noise sigma, as characterize computes a step from its runs.
func noisy(r *rand.Rand, values []float64, sigma float64, runs int) []float64 {
	out := make([]float64, len(values))
	for i, v := range values {
		draws := make([]float64, runs)
		for j := range draws {
			draws[j] = v * (1 + sigma*r.NormFloat64())
		}
		out[i] = plateau.Median(draws)
	}
	return out
}

func TestFindKneeNoisyShapes(t *testing.T) {
	shapes := []struct {
		name   string
		values []float64
		// Knees accepted on mild noise: the clean knee give or take one
		// step, because the clean curve's gain next to it is within 2-3
		// points of 5%.
		lo, hi int
	}{
		{"fast rise then flat", shapeFastRiseFlat, 5, 7},
		{"linear growth", shapeLinear, -1, -1},
		{"peak then slight decline", shapePeakDecline, 3, 5},
	}
	for _, noise := range []struct {
		sigma float64
		runs  int
		// slack widens the window: noise as large as the 5% threshold
		// makes a flat stretch look like a slow rise for a step or two,
		// and no rule can tell them apart; the sustained value must
		// still be the plateau's.
		slack int
	}{
		{0.02, 1, 0},
		{0.02, 3, 0},
		{0.05, 3, 1},
	} {
		for _, tc := range shapes {
			lo, hi := tc.lo, tc.hi
			if lo >= 0 {
				lo, hi = lo-noise.slack, hi+noise.slack
			}
			const seeds = 200
			misses := 0
			for seed := uint64(1); seed <= seeds; seed++ {
				r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
				v := noisy(r, tc.values, noise.sigma, noise.runs)
				knee := FindKnee(v)
				if knee < lo || knee > hi {
					misses++
					if misses <= 3 {
						t.Errorf("%s sigma=%.2f runs=%d seed %d: knee %d not in [%d, %d]: %.3g", tc.name, noise.sigma, noise.runs, seed, knee, lo, hi, v)
					}
					continue
				}
				want := Sustained(tc.values, FindKnee(tc.values))
				tol := 2*noise.sigma + 0.02
				if got := Sustained(v, knee); math.Abs(got/want-1) > tol {
					t.Errorf("%s sigma=%.2f runs=%d seed %d: sustained %.3g, want %.3g ± %.0f%%: %.3g", tc.name, noise.sigma, noise.runs, seed, got, want, 100*tol, v)
				}
			}
			if misses > 0 {
				t.Errorf("%s sigma=%.2f runs=%d: knee outside [%d, %d] on %d of %d seeds", tc.name, noise.sigma, noise.runs, lo, hi, misses, seeds)
			}
		}
	}
}

// A curve that doubles with every doubling of workers never looks flat,
// even through noise twice the threshold.
func TestFindKneeLinearGrowthUnderHeavyNoise(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		v := noisy(r, shapeLinear, 0.10, 1)
		if knee := FindKnee(v); knee != -1 {
			t.Fatalf("seed %d: knee %d on linear growth %.3g", seed, knee, v)
		}
	}
}

func TestMedianAndSpread(t *testing.T) {
	if m := plateau.Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3,1,2 = %g", m)
	}
	if m := plateau.Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4,1,3,2 = %g", m)
	}
	if !math.IsNaN(plateau.Median(nil)) {
		t.Error("median of nothing is not NaN")
	}
	// (110 - 90) / (2 * 100)
	if s := plateau.Spread([]float64{90, 100, 110}); math.Abs(s-0.1) > 1e-12 {
		t.Errorf("spread of 90,100,110 = %g, want 0.1", s)
	}
	if s := plateau.Spread([]float64{0, 0}); s != 0 {
		t.Errorf("spread of zeros = %g", s)
	}
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// FuzzFindKnee checks the knee's invariants on any curve: it is a step
// before the last, the first whose next smoothed step and the median of all
// later ones stay under 5% over the best up to it, and the smoothed curve is
// finite and not negative.
func FuzzFindKnee(f *testing.F) {
	enc := func(v []float64) []byte {
		b := make([]byte, 0, 8*len(v))
		for _, x := range v {
			b = append(b, byte(math.Float64bits(x)>>56), byte(math.Float64bits(x)>>48), byte(math.Float64bits(x)>>40), byte(math.Float64bits(x)>>32),
				byte(math.Float64bits(x)>>24), byte(math.Float64bits(x)>>16), byte(math.Float64bits(x)>>8), byte(math.Float64bits(x)))
		}
		return b
	}
	f.Add(enc(shapeFastRiseFlat))
	f.Add(enc(shapeLinear))
	f.Add(enc(shapePeakDecline))
	f.Add(enc([]float64{math.NaN(), math.Inf(1), -1, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v []float64
		for len(data) >= 8 {
			var u uint64
			for _, c := range data[:8] {
				u = u<<8 | uint64(c)
			}
			v = append(v, math.Float64frombits(u))
			data = data[8:]
		}
		knee := FindKnee(v)
		if knee < -1 || (knee >= 0 && knee >= len(v)-1) {
			t.Fatalf("knee %d out of range for %d steps", knee, len(v))
		}
		s := smooth3(v)
		for _, x := range s {
			if math.IsNaN(x) || x < 0 {
				t.Fatalf("smoothed curve has %g: %v", x, s)
			}
		}
		if knee >= 0 {
			best := maxOf(s[:knee+1])
			limit := (1 + KneeGain) * best
			if !(best > 0) || s[knee+1] >= limit || plateau.Median(s[knee+1:]) >= limit {
				t.Fatalf("knee %d: best %g, next %g, later median %g", knee, best, s[knee+1], plateau.Median(s[knee+1:]))
			}
		}
		// The knee is the first step that qualifies.
		for i := 0; i >= 0 && i < knee; i++ {
			best := maxOf(s[:i+1])
			limit := (1 + KneeGain) * best
			if best > 0 && s[i+1] < limit && plateau.Median(s[i+1:]) < limit {
				t.Fatalf("step %d qualifies before knee %d", i, knee)
			}
		}
		if len(v) > 0 {
			_ = Sustained(v, knee)
		}
	})
}
