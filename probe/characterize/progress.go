package characterize

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/term"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// TerminalWidth is the width of the terminal f is, or 0 when it is not a
// terminal (a pipe, a file, a batch job's log). A terminal that reports
// no size counts as 80 columns.
func TerminalWidth(f *os.File) int {
	fd := int(f.Fd())
	if !term.IsTerminal(fd) {
		return 0
	}
	if w, _, err := term.GetSize(fd); err == nil && w > 0 {
		return w
	}
	return 80
}

// Progress shows how far a characterization is. On a terminal it redraws
// one line each second, "[12/40] scratch/seq workers=4 run 2/3  elapsed
// 1m03s  ETA 2m10s"; elsewhere it logs one line per finished run, which
// batch logs keep. The ETA is the mean time from one finished run to the
// next so far (the run and the wait for --run-spacing before it) times the
// runs left, which underestimates a sweep whose later steps are longer,
// but needs no model of the storage.
type Progress struct {
	mu     sync.Mutex
	w      io.Writer
	width  int
	logger log.Logger
	now    func() time.Time

	began  time.Time
	total  int
	last   int // Index of the last finished run
	ran    int // runs finished, for the mean
	ranFor time.Duration
	// lastDone is when the last run finished.
	lastDone time.Time
	cur      *Step
	curAt    time.Time
	shown    bool // the progress line is on the terminal
	stop     chan struct{}
	ticker   sync.WaitGroup
}

// NewProgress writes the report text to w and, when width is above 0
// (w is a terminal that wide), the progress line; with width 0 progress
// goes to logger instead. now is the clock, time.Now outside tests.
func NewProgress(w io.Writer, width int, logger log.Logger, now func() time.Time) *Progress {
	return &Progress{w: w, width: width, logger: logger, now: now}
}

// ProgressTo is the progress of a characterization that prints to f: the
// progress line when f is a terminal, else the log.
func ProgressTo(f *os.File, logger log.Logger) *Progress {
	return NewProgress(f, TerminalWidth(f), logger, time.Now)
}

// Begin starts the clock for total runs, and on a terminal the redraw of
// the elapsed time.
func (p *Progress) Begin(total int) {
	p.mu.Lock()
	p.began, p.total = p.now(), total
	p.mu.Unlock()
	if p.width <= 0 {
		return
	}
	p.stop = make(chan struct{})
	p.ticker.Add(1)
	go func() {
		defer p.ticker.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.mu.Lock()
				p.draw()
				p.mu.Unlock()
			}
		}
	}()
}

// Finish stops the redraw and leaves the terminal on a clean line.
func (p *Progress) Finish() {
	if p.stop != nil {
		close(p.stop)
		p.ticker.Wait()
		p.stop = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

// Start is the Characterizer's OnStart.
func (p *Progress) Start(s Step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur, p.curAt = &s, p.now()
	// A baseline that needs more runs to be stable adds them as it goes.
	p.total = max(p.total, s.Total)
	p.draw()
}

// Done is the Characterizer's OnDone.
func (p *Progress) Done(s Step, res *probe.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	took := now.Sub(p.curAt)
	p.ran++
	p.ranFor += took
	p.lastDone = now
	p.total = max(p.total, s.Total)
	p.last = max(p.last, s.Index)
	p.cur = nil
	if p.width > 0 {
		// The line is redrawn over; a timeout is said where it stays, as
		// the run made again to confirm it is otherwise unexplained.
		if res != nil && res.Reason == probe.ReasonTimeout {
			p.clear()
			fmt.Fprintf(p.w, "%s timed out: %s\n", stepLabel(s), res.Error)
		}
		p.draw()
		return
	}
	kv := []any{"msg", "characterize run finished", "step", fmt.Sprintf("%d/%d", s.Index, s.Total), "run", stepLabel(s),
		"took", took.Round(time.Millisecond), "elapsed", formatElapsed(now.Sub(p.began)), "eta", p.eta(now)}
	if res != nil && !res.OK() {
		reason := res.Reason
		if reason == "" {
			reason = "skipped: " + res.Skipped
		}
		kv = append(kv, "result", reason, "err", res.Error)
	}
	level.Info(p.logger).Log(kv...)
}

// Printf writes report text, moving the progress line out of its way.
func (p *Progress) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, format, args...)
	p.draw()
}

// A Table is a report that prints itself as text.
type Table interface{ WriteTable(w io.Writer) }

// Print writes a report, moving the progress line out of its way.
func (p *Progress) Print(t Table) {
	var b bytes.Buffer
	t.WriteTable(&b)
	p.Printf("%s", b.Bytes())
}

func (p *Progress) eta(now time.Time) string {
	if p.ran == 0 {
		return "--"
	}
	// The mean of the runs' own durations leaves out the spacing waited
	// between them: with 15 s between starts and runs of half a second,
	// it said 0s while 15 s remained.
	mean := p.lastDone.Sub(p.began) / time.Duration(p.ran)
	left := time.Duration(p.total-p.last) * mean
	left -= min(now.Sub(p.lastDone), mean)
	return formatElapsed(max(0, left))
}

// draw redraws the progress line; the caller holds p.mu.
func (p *Progress) draw() {
	if p.width <= 0 || p.total == 0 {
		return
	}
	now := p.now()
	index, what := p.last, "waiting"
	if p.cur != nil {
		index, what = p.cur.Index, stepLabel(*p.cur)
	}
	line := fmt.Sprintf("[%d/%d] %s  elapsed %s  ETA %s", index, p.total, what, formatElapsed(now.Sub(p.began)), p.eta(now))
	// A line longer than the terminal wraps, and \r then redraws only its
	// last part.
	if utf8.RuneCountInString(line) > p.width-1 {
		r := []rune(line)
		line = string(r[:max(0, p.width-1)])
	}
	fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	p.shown = true
}

// clear erases the progress line; the caller holds p.mu.
func (p *Progress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// stepLabel is s.String(), with a size sweep's level written as the
// config writes its key (file_size=8MiB, duration=500ms) rather than in
// bytes or nanoseconds.
func stepLabel(s Step) string {
	if s.Variable != "" && s.Variable == plateau.SizeKey(s.Kind) {
		return fmt.Sprintf("%s/%s %s=%s run %d/%d%s", s.Target, s.Probe, s.Variable, plateau.FormatProbeSize(s.Kind, int64(s.Level)), s.Run, s.Runs, s.again())
	}
	return s.String()
}

// formatElapsed prints 42s, 1m03s or 2h05m.
func formatElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
