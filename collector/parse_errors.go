package collector

import (
	"fmt"
	"sort"
	"sync"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// A parser keeps every row it can read and skips the others: a release
// that adds a warning line, or one garbled row, must not hide the rows
// around it. What it skipped is reported as badLines and ends up in
// plateau_collector_parse_errors_total; only a source with nothing
// readable (no HEADER, an empty answer) still fails its collector.

// maxBadLineText bounds the text of the line quoted in the debug log.
const maxBadLineText = 200

// badLines is what one parse of a source skipped: how many lines, and the
// first of them, for the debug log.
type badLines struct {
	count int
	first string
}

// add records a skipped line: its number in the source (0 when it has
// none, as for a sysfs file), why, and its text.
func (b *badLines) add(lineNo int, reason, text string) {
	if b.count == 0 {
		if len(text) > maxBadLineText {
			text = text[:maxBadLineText] + "..."
		}
		if lineNo > 0 {
			b.first = fmt.Sprintf("line %d: %s: %q", lineNo, reason, text)
		} else {
			b.first = fmt.Sprintf("%s: %q", reason, text)
		}
	}
	b.count++
}

// merge adds the lines o skipped to b.
func (b *badLines) merge(o badLines) {
	if o.count == 0 {
		return
	}
	if b.count == 0 {
		b.first = o.first
	}
	b.count += o.count
}

// parseErrorReporter is a collector whose parsers count what they skip;
// the registry exports the counts with the collector's name.
type parseErrorReporter interface {
	parseErrors() *parseErrorCounter
}

// parseErrorCounter keeps, per source, the number of lines a collector's
// parsers skipped since the collector was built: a true counter across
// scrapes, which the per-scrape metrics of a collector cannot be.
type parseErrorCounter struct {
	logger log.Logger

	mu     sync.Mutex
	counts map[string]uint64
}

func newParseErrorCounter(logger log.Logger) *parseErrorCounter {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	return &parseErrorCounter{logger: logger, counts: map[string]uint64{}}
}

// record adds one parse of source: the source gets its series from then
// on, and the first bad line of the parse, if any, is logged at debug
// level (a node with a garbled line would otherwise log it at every run).
func (p *parseErrorCounter) record(source string, b badLines) {
	p.mu.Lock()
	p.counts[source] += uint64(b.count)
	p.mu.Unlock()
	if b.count > 0 {
		level.Debug(p.logger).Log("msg", "skipped lines the parser could not read", "source", source, "lines", b.count, "first", b.first)
	}
}

// sourceCount is the count of one source.
type sourceCount struct {
	source string
	count  uint64
}

// snapshot returns the counts, sorted by source.
func (p *parseErrorCounter) snapshot() []sourceCount {
	p.mu.Lock()
	out := make([]sourceCount, 0, len(p.counts))
	for s, n := range p.counts {
		out = append(out, sourceCount{s, n})
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].source < out[j].source })
	return out
}
