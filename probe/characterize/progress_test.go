package characterize

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// fakeClock advances only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestProgressRedrawsOneLineOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	p := NewProgress(&buf, 80, log.NewNopLogger(), clock.now)
	p.Begin(4)
	step := Step{Index: 1, Total: 4, Target: "scratch", Probe: "seq", Kind: probe.KindSequential, Variable: "workers", Level: 4, Run: 1, Runs: 2}
	p.Start(step)
	if got := buf.String(); got != "\r[1/4] scratch/seq workers=4 run 1/2  elapsed 0s  ETA --\x1b[K" {
		t.Errorf("first line %q", got)
	}
	clock.t = clock.t.Add(20 * time.Second)
	p.Done(step, &probe.Result{})
	buf.Reset()
	step.Index, step.Run = 2, 2
	p.Start(step)
	// One run took 20s; three are left, counting this one.
	if got := buf.String(); got != "\r[2/4] scratch/seq workers=4 run 2/2  elapsed 20s  ETA 1m00s\x1b[K" {
		t.Errorf("second line %q", got)
	}
	// Report text clears the line, then the line comes back below it.
	buf.Reset()
	clock.t = clock.t.Add(5 * time.Second)
	p.Printf("a report\n")
	if got := buf.String(); got != "\r\x1b[Ka report\n\r[2/4] scratch/seq workers=4 run 2/2  elapsed 25s  ETA 55s\x1b[K" {
		t.Errorf("printf %q", got)
	}
	// Lines never wrap.
	narrow := NewProgress(&buf, 20, log.NewNopLogger(), clock.now)
	narrow.Begin(4)
	buf.Reset()
	narrow.Start(step)
	if got := buf.String(); got != "\r[2/4] scratch/seq w\x1b[K" {
		t.Errorf("narrow line %q", got)
	}
	narrow.Finish()
	buf.Reset()
	p.Finish()
	if got := buf.String(); got != "\r\x1b[K" {
		t.Errorf("finish left %q", got)
	}
}

// A size sweep's step shows its size as the config writes it.
func TestProgressShowsASizeAsTheConfigWritesIt(t *testing.T) {
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	p := NewProgress(&buf, 200, log.NewNopLogger(), clock.now)
	p.Begin(2)
	p.Start(Step{Index: 1, Total: 2, Target: "t", Probe: "r", Kind: probe.KindRandom, Variable: "duration", Level: int(500 * time.Millisecond), Run: 1, Runs: 2})
	p.Finish()
	if got := buf.String(); !strings.Contains(got, "t/r duration=500ms run 1/2") {
		t.Errorf("line %q", got)
	}
}

func TestProgressLogsOneLinePerRunWithoutATerminal(t *testing.T) {
	var out, logs bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	p := NewProgress(&out, 0, log.NewLogfmtLogger(&logs), clock.now)
	p.Begin(3)
	step := Step{Index: 1, Total: 3, Target: "t", Probe: "md", Kind: probe.KindMetadata, Run: 1, Runs: 3}
	p.Start(step)
	clock.t = clock.t.Add(1500 * time.Millisecond)
	p.Done(step, &probe.Result{Reason: "enospc", Error: "no space left on device"})
	p.Finish()
	if out.Len() != 0 {
		t.Errorf("progress wrote to stdout without a terminal: %q", out.String())
	}
	want := `level=info msg="characterize run finished" step=1/3 run="t/md run 1/3" took=1.5s elapsed=2s eta=3s result=enospc err="no space left on device"` + "\n"
	if logs.String() != want {
		t.Errorf("log line\n%q\nwant\n%q", logs.String(), want)
	}
}

// Output to a pipe or a file (a batch job's log, `| tee`) gets the report
// text and nothing else: no progress line, no escape sequences; the
// progress goes to the log.
func TestProgressToAPipeOrAFileDrawsNoLine(t *testing.T) {
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeR.Close()
	file, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, tc := range []struct {
		name string
		w    *os.File
		read func() string
	}{
		{"pipe", pipeW, func() string {
			pipeW.Close()
			b, _ := io.ReadAll(pipeR)
			return string(b)
		}},
		{"file", file, func() string {
			b, _ := os.ReadFile(file.Name())
			return string(b)
		}},
	} {
		var logs bytes.Buffer
		p := ProgressTo(tc.w, log.NewLogfmtLogger(&logs))
		p.Begin(2)
		step := Step{Index: 1, Total: 2, Target: "t", Probe: "seq", Kind: probe.KindSequential, Run: 1, Runs: 2}
		p.Start(step)
		p.Printf("report text\n")
		p.Done(step, &probe.Result{})
		p.Finish()
		if got := tc.read(); got != "report text\n" {
			t.Errorf("%s: output %q, want the report text alone", tc.name, got)
		}
		if n := strings.Count(logs.String(), `msg="characterize run finished"`); n != 1 {
			t.Errorf("%s: %d progress log lines, want 1:\n%s", tc.name, n, logs.String())
		}
	}
}

func TestFormatElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 42 * time.Second: "42s", 63 * time.Second: "1m03s", 2*time.Hour + 5*time.Minute + 9*time.Second: "2h05m",
	} {
		if got := formatElapsed(d); got != want {
			t.Errorf("formatElapsed(%s) = %q, want %q", d, got, want)
		}
	}
}

// TerminalWidth must tell a terminal from a pipe or a file: a pseudo
// terminal is as real a terminal as the kernel offers.
func TestTerminalWidth(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo terminals (/dev/ptmx): %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 132}); err != nil {
		t.Fatal(err)
	}
	if w := TerminalWidth(pts); w != 132 {
		t.Errorf("terminal width %d, want 132", w)
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{}); err != nil {
		t.Fatal(err)
	}
	if w := TerminalWidth(pts); w != 80 {
		t.Errorf("terminal of unknown size: width %d, want 80", w)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := TerminalWidth(w); got != 0 {
		t.Errorf("a pipe is no terminal, got width %d", got)
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := TerminalWidth(f); got != 0 {
		t.Errorf("a file is no terminal, got width %d", got)
	}
}

// A timed-out run stays on the terminal, above the line that shows the
// run made again, so the extra run is explained.
func TestProgressKeepsATimeoutOnTheTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, 200, log.NewNopLogger(), time.Now)
	step := Step{Index: 1, Total: 2, Target: "scratch", Probe: "md", Kind: probe.KindMetadata, Variable: "workers", Level: 2, Run: 1, Runs: 1}
	p.Begin(step.Total)
	p.Start(step)
	buf.Reset()
	res := &probe.Result{}
	res.Fail(fmt.Errorf("probe scratch/md: %w", context.DeadlineExceeded))
	p.Done(step, res)
	if got := buf.String(); !strings.HasPrefix(got, "\r\x1b[Kscratch/md workers=2 run 1/1 timed out: probe scratch/md: context deadline exceeded\n") {
		t.Errorf("after a timeout %q", got)
	}
	step.Index, step.Total, step.Confirming = 2, 3, true
	buf.Reset()
	p.Start(step)
	if got := buf.String(); !strings.Contains(got, "scratch/md workers=2 run 1/1 again (it timed out)") {
		t.Errorf("the run made again %q", got)
	}
	p.Finish()
}
