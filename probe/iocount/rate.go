package iocount

// Rate is the node's own I/O on a file system during one probe run, apart
// from the run's own, in bytes per second.
type Rate struct {
	Read, Write float64
	// Source is the Sample's Source.
	Source string
}

// Concurrent is the rate of the bytes counted between before and after
// minus those the probe moved itself (probeRead, probeWrite), clamped at
// 0, over the time between the two samples. ok is false when the samples
// do not describe the same counters over a positive time (the GPFS
// values, refreshed in the background, may not have changed during a
// short run) or the counters went back (a reset, a remount).
//
// The GPFS samples span whole mmpmon intervals, which may cover only part
// of the run: the result is then coarse, and low rather than high, since
// all of the probe's bytes are subtracted.
func Concurrent(before, after Sample, probeRead, probeWrite uint64) (Rate, bool) {
	if before.Source != after.Source || before.Key != after.Key {
		return Rate{}, false
	}
	seconds := after.At.Sub(before.At).Seconds()
	if !(seconds > 0) || after.Read < before.Read || after.Write < before.Write {
		return Rate{}, false
	}
	rate := func(delta, own uint64) float64 {
		if delta <= own {
			return 0
		}
		return float64(delta-own) / seconds
	}
	return Rate{
		Read:   rate(after.Read-before.Read, probeRead),
		Write:  rate(after.Write-before.Write, probeWrite),
		Source: after.Source,
	}, true
}
