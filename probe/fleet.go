package probe

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Fleet is a target's fleet block: how many nodes probe the same file
// system and what they may move on it together. Each node derives its own
// share from it, with no coordination at run time: a node reads the same
// config as every other and computes the same intervals.
type Fleet struct {
	// Nodes is how many nodes run these probes against the file system.
	Nodes int
	// MaxBytesPerHour is the whole fleet's I/O budget on the target; 0
	// when not set (then nothing is stretched and the block only sizes
	// check-config's report).
	MaxBytesPerHour int64
	// FilesystemPlateau is what the file system delivers as a whole, in
	// bytes/s (0: unknown), to express the probe load as a fraction of it.
	FilesystemPlateau float64
	// Servers is how many targets share the block: the number of servers
	// of a target with `servers`, whose fleet block covers all of them
	// together; 0 or 1 for an ordinary target.
	Servers int
	Line    int
}

// Share is one node's part of the fleet budget for one target, in bytes
// per hour (0 when the fleet has no budget): the budget over the nodes,
// and over the servers' targets when the block covers several, so that
// every node probing every server moves at most the budget in all.
func (f *Fleet) Share() float64 {
	if f == nil || f.MaxBytesPerHour <= 0 || f.Nodes <= 0 {
		return 0
	}
	return float64(f.MaxBytesPerHour) / float64(f.Nodes) / float64(max(f.Servers, 1))
}

// MaxStretchedInterval bounds a stretched interval: a probe that runs less
// than once a week no longer watches a file system, and a budget that
// would ask for it is a mistake in the config (a missing GiB, a node count
// too many zeros long) better reported than obeyed.
const MaxStretchedInterval = 7 * 24 * time.Hour

// Stretch is how a node's share of a fleet budget stretched its target's
// probe intervals.
type Stretch struct {
	// Needed is the bytes per hour the target's probes plan at their
	// configured intervals (BytesPerRun × runs per hour); Share is the
	// node's part of the fleet budget.
	Needed, Share float64
	// Factor is Needed/Share when above 1, else 1 (nothing stretched).
	Factor float64
	// Intervals are the stretched intervals, in the order given.
	Intervals []time.Duration
}

// Stretched reports whether any interval grew.
func (s Stretch) Stretched() bool { return s.Factor > 1 }

// StretchIntervals derives one node's probe intervals from its share of a
// fleet budget (bytes per hour): when the probes, at their configured
// intervals, would plan more than the share per hour, every interval is
// stretched by the same factor f = needed/share, so that the node plans at
// most its share and the probes keep their relative frequencies. An
// interval never shrinks. A share of 0 means no budget: nothing changes.
//
// A stretched interval is a whole number of seconds, rounded up so the
// node stays within its share: the intervals' greatest common divisor g is
// stretched (g × f, rounded up to a second) and each interval is its
// multiple of g times that. Intervals that were multiples of one another
// stay so, and the fleet's hyper-period (the least common multiple of the
// intervals, over which check-config simulates the load) grows by f, not
// to a product of odd seconds. Where that rounding would add more than 1%
// (g × f under 100 s), each interval is rounded up to a second on its own.
// A stretched interval beyond MaxStretchedInterval is an error.
func StretchIntervals(intervals []time.Duration, bytesPerRun []int64, share float64) (Stretch, error) {
	if len(intervals) != len(bytesPerRun) {
		return Stretch{}, fmt.Errorf("%d intervals but %d byte counts", len(intervals), len(bytesPerRun))
	}
	s := Stretch{Share: share, Factor: 1, Intervals: append([]time.Duration(nil), intervals...)}
	for i, iv := range intervals {
		if iv <= 0 {
			return Stretch{}, fmt.Errorf("interval %s is not positive", iv)
		}
		s.Needed += float64(bytesPerRun[i]) * float64(time.Hour) / float64(iv)
	}
	if share <= 0 || s.Needed <= share {
		return s, nil
	}
	s.Factor = s.Needed / share
	if math.IsInf(s.Factor, 0) || math.IsNaN(s.Factor) {
		return Stretch{}, fmt.Errorf("a share of %g bytes per hour cannot hold %g", share, s.Needed)
	}
	g := intervals[0]
	for _, iv := range intervals {
		g = gcd(g, iv)
		// Checked before any rounding, which would overflow a Duration.
		if st := float64(iv) * s.Factor; st > float64(MaxStretchedInterval) {
			return Stretch{}, tooLong(share, iv, s.Factor, st)
		}
	}
	unit := ceilSeconds(float64(g) * s.Factor)
	common := float64(unit) <= float64(g)*s.Factor*1.01
	for i, iv := range intervals {
		var st float64
		if common {
			st = float64(iv/g) * float64(unit)
		} else {
			st = float64(ceilSeconds(float64(iv) * s.Factor))
		}
		if st > float64(MaxStretchedInterval) {
			return Stretch{}, tooLong(share, iv, s.Factor, st)
		}
		// ceilSeconds' tolerance of a microsecond must not shrink an
		// interval configured a hair above a whole second.
		s.Intervals[i] = max(time.Duration(st), iv)
	}
	return s, nil
}

func tooLong(share float64, iv time.Duration, factor, stretched float64) error {
	return fmt.Errorf("the share %s per hour would stretch the interval %s by %.4g to %.0fh, beyond %s: raise the fleet's max_bytes_per_hour or make the probes smaller",
		FormatBytes(share), iv, factor, stretched/float64(time.Hour), MaxStretchedInterval)
}

// ceilSeconds rounds nanoseconds up to a whole second; a value already
// within a microsecond above a whole second is taken as that second, so
// that float rounding of an exact product does not add one.
func ceilSeconds(ns float64) time.Duration {
	sec := math.Ceil(ns/float64(time.Second) - 1e-6)
	if sec < 1 {
		sec = 1
	}
	return time.Duration(sec) * time.Second
}

func gcd(a, b time.Duration) time.Duration {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ApplyFleet derives the target's intervals for a fleet of nodes (the
// fleet block's own count, or another for check-config's what-if report):
// each probe's Interval becomes its ConfiguredInterval stretched by the
// node's share of the fleet budget (unchanged without a budget). It records
// the result in t.Stretch and returns it. Timeouts stay valid: they were
// shorter than the configured intervals, which only grow.
//
// The fleet budget plans intervals; the target's own max_bytes_per_hour
// still holds the node at run time, skipping a run that would take its
// last hour over it (reason budget). Both apply: the fleet budget keeps
// the fleet's planned load within what the file system can spare, from
// BytesPerRun (a random probe counts its file_size, the bytes it reserves);
// the node's budget bounds what the node really moves, a random probe's
// storage-dependent bytes included. A node budget below the share makes
// the node skip runs rather than stretch further.
func (t *Target) ApplyFleet(nodes int) (Stretch, error) {
	intervals := make([]time.Duration, len(t.Probes))
	bytes := make([]int64, len(t.Probes))
	for i, p := range t.Probes {
		intervals[i] = p.BaseInterval()
		bytes[i] = BytesPerRun(p)
	}
	var share float64
	if t.Fleet != nil && nodes > 0 {
		f := *t.Fleet
		f.Nodes = nodes
		share = f.Share()
	}
	s, err := StretchIntervals(intervals, bytes, share)
	if err != nil {
		return Stretch{}, err
	}
	for i, p := range t.Probes {
		p.ConfiguredInterval = intervals[i]
		p.Interval = s.Intervals[i]
	}
	t.Stretch = s
	return s, nil
}

// BaseInterval is the probe's interval as configured, before a fleet
// budget stretched it.
func (p *ProbeConfig) BaseInterval() time.Duration {
	if p.ConfiguredInterval > 0 {
		return p.ConfiguredInterval
	}
	return p.Interval
}

// ParseRate parses a rate in bytes per second: a size with an optional
// "/s" ("40GiB/s", "512MiB", "4096") or a plain number, also in exponent
// form as Prometheus prints values ("4.2e+10").
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSpace(strings.TrimSuffix(t, "/s"))
	if v, err := strconv.ParseFloat(t, 64); err == nil {
		if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return 0, fmt.Errorf("rate %q must be a positive number of bytes per second", s)
		}
		return v, nil
	}
	v, err := ParseSize(t)
	if err != nil {
		return 0, fmt.Errorf("invalid rate %q (want bytes per second: a number, or a size with a binary unit, e.g. 40GiB/s)", s)
	}
	if v <= 0 {
		return 0, fmt.Errorf("rate %q must be a positive number of bytes per second", s)
	}
	return float64(v), nil
}

// FormatBytes renders an amount that need not be whole (a share, a rate
// × 1 s) in the largest binary unit it reaches, exactly when it is a whole
// number of it (40GiB), else with one decimal (81.9MiB, 8.1GiB, 512B).
func FormatBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := b
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f%s", v, units[i])
	}
	return fmt.Sprintf("%.1f%s", v, units[i])
}

// HyperPeriod is the least common multiple of the intervals, after which
// the fleet's combined schedule repeats, or false when it exceeds limit.
func HyperPeriod(intervals []time.Duration, limit time.Duration) (time.Duration, bool) {
	l := big.NewInt(1)
	for _, d := range intervals {
		b := big.NewInt(int64(d))
		g := new(big.Int).GCD(nil, nil, l, b)
		l.Mul(l, b.Div(b, g))
		if l.Cmp(big.NewInt(int64(limit))) > 0 {
			return 0, false
		}
	}
	return time.Duration(l.Int64()), true
}

// ForFleet is a copy of the target with its intervals derived for a fleet
// of nodes (see ApplyFleet), for a report of what such a fleet would do;
// the target itself is left as it runs.
func (t *Target) ForFleet(nodes int) (*Target, error) {
	c := *t
	c.Probes = make([]*ProbeConfig, len(t.Probes))
	for i, p := range t.Probes {
		pc := *p
		c.Probes[i] = &pc
	}
	if _, err := c.ApplyFleet(nodes); err != nil {
		return nil, fmt.Errorf("target %s with %d nodes: %w", t.Name, nodes, err)
	}
	return &c, nil
}

// StretchSummary lists the stretched probes as "seq 15m0s→46m53s, …", or
// "" when none stretched.
func (t *Target) StretchSummary() string {
	var parts []string
	for _, p := range t.Probes {
		if p.Interval != p.BaseInterval() {
			parts = append(parts, fmt.Sprintf("%s %s→%s", p.Name, p.BaseInterval(), p.Interval))
		}
	}
	return strings.Join(parts, ", ")
}
