package schedule

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// SimulatedHosts names a fleet of n nodes node0001 … nodeNNNN, zero-padded
// to 4 digits or to as many as n has.
func SimulatedHosts(n int) []string {
	width := len(fmt.Sprint(n))
	if width < 4 {
		width = 4
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("node%0*d", width, i+1)
	}
	return hosts
}

// ParseHosts reads a fleet's host names, one a line, as each node's
// scheduler knows itself (os.Hostname, or --probe.hostname): blank lines
// and everything from a '#' on are ignored, surrounding white space is
// trimmed. A line with two words, a name given twice or a file without a
// name is an error naming the file and the line.
func ParseHosts(data []byte, file string) ([]string, error) {
	var hosts []string
	first := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		if !utf8.ValidString(text) || strings.ContainsFunc(text, isSpaceOrControl) {
			return nil, fmt.Errorf("%s:%d: %q: want one host name per line", file, line, text)
		}
		if prev, dup := first[text]; dup {
			return nil, fmt.Errorf("%s:%d: host %q is listed twice (first at line %d)", file, line, text, prev)
		}
		first[text] = line
		hosts = append(hosts, text)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", file, line+1, err)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%s: no host names", file)
	}
	return hosts, nil
}

func isSpaceOrControl(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// FleetLoadParams is what FleetLoadOf simulates.
type FleetLoadParams struct {
	// Target's probes at the intervals they run at (stretched, if its
	// fleet budget stretched them).
	Target *probe.Target
	// Hosts are the fleet's host names, which place each node's slots.
	Hosts []string
	// Bin is the span the peak is averaged over (default 1m).
	Bin time.Duration
	// MaxWindow bounds the simulated span (default 8 days, beyond the
	// longest interval a fleet budget may stretch to); MaxRuns the runs
	// simulated (default 20 million), which may cut the span further.
	MaxWindow time.Duration
	MaxRuns   int
}

// DefaultFleetBin is the span the fleet's peak load is averaged over: a
// probe run lasts seconds, well within it, and a file system's load
// balancing and caches work on that scale too.
const DefaultFleetBin = time.Minute

// DefaultFleetWindow bounds the simulated span: a day more than the
// longest interval a fleet budget may stretch a probe to.
const DefaultFleetWindow = probe.MaxStretchedInterval + 24*time.Hour

// FleetLoad is a fleet's probe load on one target's file system.
type FleetLoad struct {
	Nodes int
	// Mean is the arithmetic load in bytes/s: the sum over probes of
	// nodes × BytesPerRun / interval.
	Mean float64
	// Peak is the most bytes/s of any Bin of the simulated Window, PeakAt
	// that bin's start (unix time, the schedule's own clock).
	Peak   float64
	PeakAt time.Time
	Bin    time.Duration
	// Window is the simulated span from unix time 0; HyperPeriod is when
	// the fleet's schedule repeats (0 when beyond MaxWindow). Window
	// covers it whole when Complete, and Peak is then the peak at any
	// time; else it is the peak of the span.
	Window, HyperPeriod time.Duration
	Complete            bool
}

// Herd is Peak/Mean: 1.0 is a perfectly spread fleet, nodes × bins per
// interval one where every node runs in the same bin.
func (l FleetLoad) Herd() float64 {
	if l.Mean == 0 {
		return 0
	}
	return l.Peak / l.Mean
}

// FleetLoadOf simulates every host's runs of the target's probes at the
// slots the scheduler gives them (ProbeOffset: the same hash, the same
// splay rule) over one hyper-period of the intervals, or the part of it
// the bounds allow, counting each run's BytesPerRun in the bin where it
// starts. Runs last seconds while a bin lasts a minute, so a run's bytes
// fall in its start bin or the next; a node's baseline throughput would
// not tell how long a run takes while thousands run at once, so the
// simulation does not pretend to know. The peak is the offered load of the
// busiest bin: with splay off every node starts in the same bin, and that
// bin holds nodes × BytesPerRun.
func FleetLoadOf(o FleetLoadParams) (FleetLoad, error) {
	bin := o.Bin
	if bin <= 0 {
		bin = DefaultFleetBin
	}
	maxWindow := o.MaxWindow
	if maxWindow <= 0 {
		maxWindow = DefaultFleetWindow
	}
	maxRuns := o.MaxRuns
	if maxRuns <= 0 {
		maxRuns = 20_000_000
	}
	if len(o.Hosts) == 0 {
		return FleetLoad{}, fmt.Errorf("target %s: a fleet needs at least one host", o.Target.Name)
	}
	l := FleetLoad{Nodes: len(o.Hosts), Bin: bin}
	intervals := make([]time.Duration, 0, len(o.Target.Probes))
	var runsPerSecond float64
	for _, p := range o.Target.Probes {
		intervals = append(intervals, p.Interval)
		l.Mean += float64(len(o.Hosts)) * float64(probe.BytesPerRun(p)) / p.Interval.Seconds()
		runsPerSecond += float64(len(o.Hosts)) / p.Interval.Seconds()
	}
	window := maxWindow
	if h, ok := probe.HyperPeriod(intervals, maxWindow); ok {
		l.HyperPeriod = h
		window = h
	}
	if runs := float64(maxRuns) / runsPerSecond; runs < window.Seconds() {
		window = time.Duration(runs * float64(time.Second))
	}
	if window < bin {
		window = bin
	}
	// Whole bins: a partial last bin would understate its load.
	nbins := int((window + bin - 1) / bin)
	l.Window = time.Duration(nbins) * bin
	l.Complete = l.HyperPeriod > 0 && l.Window >= l.HyperPeriod
	sums := make([]float64, nbins)
	for _, p := range o.Target.Probes {
		b := float64(probe.BytesPerRun(p))
		if b == 0 {
			continue
		}
		for _, h := range o.Hosts {
			for at := ProbeOffset(h, o.Target.Name, p); at < l.Window; at += p.Interval {
				sums[at/bin] += b
			}
		}
	}
	for i, s := range sums {
		if rate := s / bin.Seconds(); rate > l.Peak {
			l.Peak = rate
			l.PeakAt = time.Unix(0, int64(time.Duration(i)*bin)).UTC()
		}
	}
	return l, nil
}
