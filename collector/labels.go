package collector

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// labelPairs are the label pairs of one object (an NFS mount, an
// InfiniBand port) built once per scrape and shared by all of its metrics.
// prometheus.MustNewConstMetric builds a fresh, sorted set of pairs for
// every metric; with tens of metrics per object that was most of what a
// scrape allocated. The pairs come from prometheus.MakeLabelPairs, so names
// and order are the Desc's; they may only be used with descriptors that
// have the same variable label names and no constant labels.
type labelPairs []*dto.LabelPair

// newLabelPairs builds the pairs of desc for values, which must already be
// valid UTF-8 (see labelValue).
func newLabelPairs(desc *prometheus.Desc, values ...string) labelPairs {
	return prometheus.MakeLabelPairs(desc, values)
}

// labelValue makes a string read from the system usable as a label value.
// Mount points, file system names and device strings are bytes, not
// necessarily UTF-8, and prometheus.MustNewConstMetric panics on invalid
// UTF-8, which would take the whole exporter down with one odd mount.
func labelValue(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// metric returns a metric of d with these labels.
func (lp labelPairs) metric(d *typedDesc, value float64) prometheus.Metric {
	return &sharedLabelMetric{desc: d.desc, valueType: d.valueType, value: value, labels: lp}
}

// sharedLabelMetric is a constant metric whose label pairs are shared.
// Write hands out the shared slice, as client_golang's own constant
// metrics do; the registry reads it and does not modify it.
type sharedLabelMetric struct {
	desc      *prometheus.Desc
	valueType prometheus.ValueType
	value     float64
	labels    labelPairs
}

func (m *sharedLabelMetric) Desc() *prometheus.Desc { return m.desc }

func (m *sharedLabelMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	v := m.value
	switch m.valueType {
	case prometheus.CounterValue:
		out.Counter = &dto.Counter{Value: &v}
	case prometheus.GaugeValue:
		out.Gauge = &dto.Gauge{Value: &v}
	default:
		out.Untyped = &dto.Untyped{Value: &v}
	}
	return nil
}

// labelPairsCache keeps label pairs from one scrape to the next. A node's
// objects (NFS mounts and their operations, HCA ports) rarely change, and
// building their pairs, sorted protobuf messages, was a sixth of what a
// large scrape allocated. Pairs are never modified once built, so
// concurrent scrapes share them, as a constant metric kept by a collector
// shares its own.
type labelPairsCache struct {
	desc *prometheus.Desc

	mu         sync.Mutex
	entries    map[string]*cachedLabelPairs
	generation uint64
	key        []byte
}

type cachedLabelPairs struct {
	pairs      labelPairs
	generation uint64
}

// newLabelPairsCache caches pairs for desc and the descriptors that share
// its variable labels (see labelPairs).
func newLabelPairsCache(desc *prometheus.Desc) *labelPairsCache {
	return &labelPairsCache{desc: desc, entries: map[string]*cachedLabelPairs{}}
}

// get returns the pairs for values, which must be valid UTF-8.
func (c *labelPairsCache) get(values ...string) labelPairs {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.key = c.key[:0]
	for _, v := range values {
		// 0xff never occurs in UTF-8, so the key is unambiguous.
		c.key = append(c.key, v...)
		c.key = append(c.key, 0xff)
	}
	if e, ok := c.entries[string(c.key)]; ok {
		e.generation = c.generation
		return e.pairs
	}
	pairs := newLabelPairs(c.desc, values...)
	c.entries[string(c.key)] = &cachedLabelPairs{pairs: pairs, generation: c.generation}
	return pairs
}

// sweep ends a scrape: pairs it did not use are dropped, so that mounts
// that come and go (automount) do not grow the cache.
func (c *labelPairsCache) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.generation != c.generation {
			delete(c.entries, k)
		}
	}
	c.generation++
}

// seenSet keeps what a loop has already exported: two series with the same
// labels would fail the whole scrape, so the first is kept and a repeat
// (the same file system mounted twice, names that are the same once made
// valid UTF-8) is skipped.
type seenSet[K comparable] map[K]bool

// first reports whether k is new, and remembers it.
func (s seenSet[K]) first(k K) bool {
	if s[k] {
		return false
	}
	s[k] = true
	return true
}
