package backtest

import "time"

// Series is one probe op's recorded results, oldest first: what a probe
// on one node measured run after run, as the daemon exports it in
// plateau_probe_throughput_bytes_per_second or
// plateau_probe_operations_per_second.
type Series struct {
	// Key names the series in reports, e.g. "cori/cscratch/ior/read" or
	// "node01:9731/scratch/seq/write".
	Key string
	// Times are the runs' start times, Values their results, index by index.
	Times  []time.Time
	Values []float64
	// Labels are what named the series: the CSV's series and group
	// columns, or the Prometheus series' labels. `backtest --fleet`
	// groups series by some of them (--group-columns).
	Labels map[string]string
	// Others is, run by run, the rate (bytes/s) at which everyone else
	// moved data on the series' file system in the run's direction while
	// it ran; NaN where unknown, nil where the input records none.
	Others []float64
}
