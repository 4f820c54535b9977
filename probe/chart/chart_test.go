package chart

import (
	"math"
	"testing"
)

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ top, want float64 }{
		{23.3, 5}, {100, 20}, {7, 2}, {1, 0.2}, {12, 2.5}, {0, 1}, {450, 100},
	} {
		if got := NiceStep(tc.top); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("NiceStep(%g) = %g, want %g", tc.top, got, tc.want)
		}
	}
}
