package store

// Collect: what a scrape does. It copies the recorded state out under the
// read lock, so a scrape never waits for a probe, and adds the per-target
// counts the fleet rules read.

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	now := time.Now()
	// Per target: whether any op has the verdict (the series exists) and
	// whether any op's verdict is 1; how many probes have each of the
	// exporter's own conditions.
	type targetVerdict struct {
		hasRegression, regression, hasRecent, belowWarning, hasLong, belowPlateau bool
		hasConcurrent, concurrentBusy, hasModeMismatch                            bool
		failing, notRun, modeMismatch                                             int
		// lowScores are the low scores of the target's ops that have one,
		// combined by plateau.TargetScore.
		lowScores []float64
		// normalRatio is the lowest of those ops' NormalRatio.
		normalRatio float64
	}
	targets := map[string]*targetVerdict{}
	for _, st := range s.probes {
		l := []string{st.target, st.probe, st.kind}
		tv := targets[st.target]
		if tv == nil {
			tv = &targetVerdict{}
			targets[st.target] = tv
		}
		failing, notRun := st.failing(now), st.notRun(now)
		tv.failing += int(b2f(failing))
		tv.notRun += int(b2f(notRun))
		gauge(descInterval, st.interval, l...)
		gauge(descFailing, b2f(failing), l...)
		gauge(descNotRun, b2f(notRun), l...)
		gauge(descInProgress, b2f(st.inProgress), l...)
		for _, r := range slices.Sorted(maps.Keys(st.runs)) {
			counter(descRuns, st.runs[r], append(l, r)...)
		}
		for _, r := range slices.Sorted(maps.Keys(st.errors)) {
			counter(descErrors, st.errors[r], append(l, r)...)
		}
		for _, r := range slices.Sorted(maps.Keys(st.skips)) {
			counter(descSkips, st.skips[r], append(l, r)...)
		}
		for _, op := range slices.Sorted(maps.Keys(st.ioBytes)) {
			counter(descIOBytes, st.ioBytes[op], append(l, op)...)
		}
		for _, op := range slices.Sorted(maps.Keys(st.latency)) {
			ch <- newHistogramMetric(descLatency, st.latency[op], append(l, op)...)
		}
		if st.last != nil {
			gauge(descSuccess, b2f(st.last.OK()), l...)
			gauge(descLastRun, float64(st.last.End.UnixNano())/1e9, l...)
			gauge(descDuration, st.last.End.Sub(st.last.Start).Seconds(), l...)
		}
		if ls := st.lastSuccess; ls != nil {
			gauge(descLastSuccess, float64(ls.End.UnixNano())/1e9, l...)
			gauge(descInfo, 1, append(l, boolLabel(ls.Direct), ls.Engine)...)
			// A run in another I/O mode than its baselines' would raise or
			// hide a regression that is only the mode, so it gets no ratio.
			if len(st.plateau.Baselines) > 0 {
				mismatch := st.plateau.ModeMismatch(ls) != ""
				tv.hasModeMismatch = true
				tv.modeMismatch += int(b2f(mismatch))
				gauge(descModeMismatch, b2f(mismatch), l...)
			}
			// Rates are only meaningful while the last run succeeded; a
			// failing probe must not keep showing yesterday's numbers.
			if st.last == ls {
				for _, op := range ls.Ops {
					// A phase that is no measurement (the random
					// probe's preallocation) moves bytes, counted in
					// io_bytes_total, but is no result.
					if !isMeasurement(st.kind, op.Op) {
						continue
					}
					gauge(descThroughput, op.BytesPerSecond(), append(l, op.Op)...)
					gauge(descOpsRate, op.OperationsPerSecond(), append(l, op.Op)...)
				}
				if c := st.concurrent; c != nil {
					gauge(descConcurrent, c.Read, append(l, "read")...)
					gauge(descConcurrent, c.Write, append(l, "write")...)
					for op, moved := range map[string]float64{"read": c.Read, "write": c.Write} {
						if b, ok := st.plateau.Baselines[op]; ok && b.Unit == probe.UnitBytesPerSecond {
							tv.hasConcurrent = true
							tv.concurrentBusy = tv.concurrentBusy || moved > ConcurrentBusyFraction*b.Value
						}
					}
				}
				// The medians divide the history, kept in the kind's unit,
				// by the plateau: only where the ratio is exported, in the
				// same unit, so that they are medians of that ratio.
				plateaus := map[string]float64{}
				for _, v := range st.plateau.Compare(ls) {
					if v.HasRatio {
						gauge(descRatio, v.Ratio, append(l, v.Op)...)
						if v.Unit == probe.OpUnit(st.kind) {
							plateaus[v.Op] = v.Baseline.Value
						}
					}
				}
				for _, op := range ls.Ops {
					if !isMeasurement(st.kind, op.Op) {
						continue
					}
					k := plateau.HistoryKey{Target: st.target, Probe: st.probe, Op: op.Op, Params: st.params}
					ol := append(l, op.Op)
					v := plateau.RunVerdicts(s.history[k].Results, plateaus[op.Op])
					if v.HasChange {
						tv.hasRegression = true
						tv.regression = tv.regression || v.Regression
					}
					if v.HasLowScore {
						if len(tv.lowScores) == 0 || v.NormalRatio < tv.normalRatio {
							tv.normalRatio = v.NormalRatio
						}
						tv.lowScores = append(tv.lowScores, v.LowScore)
					}
					if v.HasRecent {
						tv.hasRecent = true
						tv.belowWarning = tv.belowWarning || v.RecentMedian < st.plateau.Warning
					}
					if v.HasLong {
						tv.hasLong = true
						tv.belowPlateau = tv.belowPlateau || v.LongMedian < st.plateau.Warning
					}
					if c := v.Change; v.HasChange {
						gauge(descChange, c.Ratio, ol...)
						gauge(descChangeNoise, c.Noise, ol...)
						gauge(descChangeFast, c.FastRatio, ol...)
						gauge(descChangeFastNoise, c.FastNoise, ol...)
						gauge(descChangeLowRuns, float64(c.LowRuns), ol...)
						gauge(descRegression, b2f(v.Regression), ol...)
					}
					if v.HasRecent {
						gauge(descMedianRecent, v.RecentMedian, ol...)
					}
					if v.HasLong {
						gauge(descMedianLong, v.LongMedian, ol...)
					}
				}
			}
		}
		for _, op := range slices.Sorted(maps.Keys(st.plateau.Baselines)) {
			b := st.plateau.Baselines[op]
			d := descBaselineOps
			if b.Unit == probe.UnitBytesPerSecond {
				d = descBaselineBytes
			}
			gauge(d, b.Value, append(l, op)...)
		}
		gauge(descThreshold, st.plateau.Warning, st.target, st.probe, "warning")
		gauge(descThreshold, st.plateau.Critical, st.target, st.probe, "critical")
	}
	for _, name := range slices.Sorted(maps.Keys(targets)) {
		tv := targets[name]
		if tv.hasRegression {
			gauge(descTargetRegression, b2f(tv.regression), name)
		}
		if len(tv.lowScores) > 0 {
			gauge(descTargetLowScore, plateau.TargetScore(tv.lowScores), name)
			gauge(descTargetNormalRatio, tv.normalRatio, name)
		}
		if tv.hasRecent {
			gauge(descTargetBelowWarning, b2f(tv.belowWarning), name)
		}
		if tv.hasLong {
			gauge(descTargetBelowPlateau, b2f(tv.belowPlateau), name)
		}
		if tv.hasConcurrent {
			gauge(descTargetConcurrentBusy, b2f(tv.concurrentBusy), name)
		}
		gauge(descTargetFailing, float64(tv.failing), name)
		gauge(descTargetNotRun, float64(tv.notRun), name)
		if tv.hasModeMismatch {
			gauge(descTargetModeMismatch, float64(tv.modeMismatch), name)
		}
	}
	for name, ts := range s.targets {
		gauge(descHung, b2f(ts.abandoned > 0), name)
		gauge(descAbandoned, float64(ts.abandoned), name)
		counter(descTargetIOBytes, ts.ioBytes, name)
		if ts.serves != "" {
			gauge(descTargetServesInfo, 1, name, ts.serves)
		}
		if ts.server != "" {
			gauge(descTargetServerInfo, 1, name, ts.group, ts.server)
		}
	}
	gauge(descHistoryLoaded, b2f(s.historyLoaded))
	counter(descHistoryWriteErrors, float64(s.writeErrors.Load()))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
