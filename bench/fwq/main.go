// Command fwq is a fixed-work-quantum noise probe for bench/noise.sh, after
// the FWQ benchmark of Sandia and LLNL: it repeats the same small piece of
// arithmetic (calibrated to take about -quantum on an undisturbed core) and
// records how long each repetition took. Any time above the fastest
// repetition is a detour: the core was taken by an interrupt, another
// process, or a daemon's timer. Run one copy per core, pinned (taskset),
// with GOMAXPROCS=1 and GOGC=off so the Go runtime itself adds nothing:
// the loop allocates nothing after start-up.
//
// Output is one line of JSON: the samples' count, the fastest quantum,
// the mean detour as a fraction of it, and the 99th, 99.9th percentile and
// largest detours in microseconds.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"
)

// work is the fixed quantum: a dependent chain of integer operations the
// compiler cannot fold away (its result is printed).
func work(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		x ^= x >> 29
	}
	return x
}

// calibrate finds the loop count whose fastest run takes about quantum.
// Its result is returned so the calibration runs cannot be optimized away.
func calibrate(quantum time.Duration) (int, uint64) {
	n := 1 << 10
	var sink uint64
	for {
		best := time.Duration(1 << 62)
		for range 20 {
			start := time.Now()
			sink += work(n, uint64(n))
			best = min(best, time.Since(start))
		}
		if best >= quantum/2 {
			return int(float64(n) * float64(quantum) / float64(best)), sink
		}
		n *= 2
	}
}

type summary struct {
	Core         string  `json:"core"`
	Samples      int     `json:"samples"`
	QuantumUS    float64 `json:"quantum_us"`
	MeanOverhead float64 `json:"mean_overhead_ratio"`
	DetourP99US  float64 `json:"detour_p99_us"`
	DetourP999US float64 `json:"detour_p999_us"`
	DetourMaxUS  float64 `json:"detour_max_us"`
	Checksum     uint64  `json:"checksum"`
}

func main() {
	quantum := flag.Duration("quantum", time.Millisecond, "fixed work per sample on an undisturbed core")
	samples := flag.Int("samples", 10000, "number of samples")
	core := flag.String("core", "", "label of the core this copy is pinned to")
	flag.Parse()
	if *samples < 1000 {
		fmt.Fprintln(os.Stderr, "fwq: -samples must be at least 1000 for a 99.9th percentile")
		os.Exit(2)
	}
	n, sum := calibrate(*quantum)
	took := make([]time.Duration, *samples)
	for i := range took {
		start := time.Now()
		sum += work(n, uint64(i))
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	fastest := took[0]
	var total time.Duration
	for _, d := range took {
		total += d - fastest
	}
	detour := func(q float64) float64 {
		return float64(took[int(q*float64(len(took)-1))]-fastest) / float64(time.Microsecond)
	}
	s := summary{
		Core:         *core,
		Samples:      len(took),
		QuantumUS:    float64(fastest) / float64(time.Microsecond),
		MeanOverhead: float64(total) / float64(len(took)) / float64(fastest),
		DetourP99US:  detour(0.99),
		DetourP999US: detour(0.999),
		DetourMaxUS:  detour(1),
		Checksum:     sum,
	}
	if err := json.NewEncoder(os.Stdout).Encode(s); err != nil {
		fmt.Fprintln(os.Stderr, "fwq:", err)
		os.Exit(1)
	}
}
