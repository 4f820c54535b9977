package plateau

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// SizeKey is the config key a size sweep of the kind grows, "" for none.
func SizeKey(kind string) string {
	switch kind {
	case probe.KindSequential:
		return "file_size"
	case probe.KindSharedFile:
		return "segment_size"
	case probe.KindMetadata:
		return "files"
	case probe.KindRandom:
		return "duration"
	}
	return ""
}

// MinSizeKey is the baselines file's per-probe key holding the smallest
// good size, "min_" + SizeKey: min_file_size, min_segment_size, min_files
// or min_duration.
func MinSizeKey(kind string) string {
	if k := SizeKey(kind); k != "" {
		return "min_" + k
	}
	return ""
}

// SizeOf is the probe's value of its size key: bytes, a file count, or
// nanoseconds.
func SizeOf(p *probe.ProbeConfig) int64 {
	switch p.Kind {
	case probe.KindSequential:
		return p.FileSize
	case probe.KindSharedFile:
		return p.SegmentSize
	case probe.KindMetadata:
		return int64(p.Files)
	case probe.KindRandom:
		return int64(p.Duration)
	}
	return 0
}

// FormatProbeSize renders a value of the kind's size key as the config
// writes it: 16MiB, 256, 1s.
func FormatProbeSize(kind string, v int64) string {
	switch kind {
	case probe.KindMetadata:
		return strconv.FormatInt(v, 10)
	case probe.KindRandom:
		return time.Duration(v).String()
	}
	return probe.FormatSize(v)
}

// ParseProbeSize reads a value of the kind's size key as the config
// accepts it.
func ParseProbeSize(kind, s string) (int64, error) {
	switch kind {
	case probe.KindMetadata:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("must be a positive number of files, got %q", s)
		}
		return n, nil
	case probe.KindRandom:
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("must be a positive duration, got %q", s)
		}
		return int64(d), nil
	case probe.KindSequential, probe.KindSharedFile:
		n, err := probe.ParseSize(s)
		if err != nil {
			return 0, err
		}
		if n <= 0 {
			return 0, fmt.Errorf("must be a positive size, got %q", s)
		}
		return n, nil
	}
	return 0, fmt.Errorf("kind %s has no size to sweep", kind)
}

// MinSize is the smallest good size of one probe, as the baselines file
// keeps it under the probe's min_<key>.
type MinSize struct {
	Kind string
	// Key is SizeKey(Kind); Value is in its units.
	Key   string
	Value int64
	Line  int
}

// String renders the size as the config writes it.
func (m MinSize) String() string { return FormatProbeSize(m.Kind, m.Value) }

// ProbeKey names one probe of one target.
type ProbeKey struct{ Target, Probe string }

// SetMinSize records a probe's smallest good size. The size is kept
// beside the probe's op entries, which must exist for it to be written.
func (b *Baselines) SetMinSize(target, probeName string, m MinSize) {
	if b.MinSizes == nil {
		b.MinSizes = map[ProbeKey]MinSize{}
	}
	b.MinSizes[ProbeKey{target, probeName}] = m
}

// MinSizeFor is the smallest good size on file for a configured probe,
// when one is and it was measured for the probe's kind.
func (b *Baselines) MinSizeFor(target string, p *probe.ProbeConfig) (MinSize, bool) {
	if b == nil {
		return MinSize{}, false
	}
	m, ok := b.MinSizes[ProbeKey{target, p.Name}]
	if !ok || m.Kind != p.Kind {
		return MinSize{}, false
	}
	return m, true
}

// BelowMinSize says, when a configured probe is smaller than the smallest
// size that measured the plateau on this target, by how much; "" when it
// is not or nothing is on file.
func (b *Baselines) BelowMinSize(target string, p *probe.ProbeConfig) string {
	m, ok := b.MinSizeFor(target, p)
	if !ok || SizeOf(p) >= m.Value {
		return ""
	}
	return fmt.Sprintf("%s %s is below %s, the smallest size that measured the plateau on this target (characterize --size-sweep); its results read the probe's start-up more than the storage",
		m.Key, FormatProbeSize(p.Kind, SizeOf(p)), m)
}

// sizeKeyKind is the kind whose min_<key> key is named key, "" for none.
func sizeKeyKind(key string) []string {
	var kinds []string
	for _, k := range probe.KindNames() {
		if MinSizeKey(k) == key {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// isMinSizeKey reports whether key is some kind's min_<key>.
func isMinSizeKey(key string) bool {
	return strings.HasPrefix(key, "min_") && len(sizeKeyKind(key)) > 0
}
