package backtest

import (
	"fmt"
	"os"
	"strings"

	"github.com/plateau-exporter/plateau_exporter/probe/chart"
)

// WriteSVGFile draws the series named key (the first when key is empty):
// its replayed runs, its plateau and the page episodes of both rule sets
// on it as recorded.
func (r *Report) WriteSVGFile(path, key string) error {
	i := 0
	if key != "" {
		i = -1
		var keys []string
		for j, s := range r.Series {
			keys = append(keys, s.Key)
			if s.Key == key {
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("backtest --svg-series: no series %q (have %s)", key, strings.Join(keys, ", "))
		}
	}
	if i >= len(r.charts) {
		return fmt.Errorf("backtest --svg: no series to draw")
	}
	cd := r.charts[i]
	rc := chart.RunsChart{
		Title:   fmt.Sprintf("%s: runs, plateau and page episodes (%s rules vs %s rules)", r.Series[i].Key, RuleSetCurrent, RuleSetReference),
		Unit:    r.Options.Unit,
		Values:  cd.values,
		Plateau: cd.baseline,
		Bands: map[string][][2]float64{
			"pages, " + RuleSetReference + " rules": cd.pages[RuleSetReference],
			"pages, " + RuleSetCurrent + " rules":   cd.pages[RuleSetCurrent],
		},
		BandOrder: []string{"pages, " + RuleSetReference + " rules", "pages, " + RuleSetCurrent + " rules"},
	}
	if err := os.WriteFile(path, rc.SVG(), 0o644); err != nil {
		return fmt.Errorf("backtest --svg: %w", err)
	}
	return nil
}
