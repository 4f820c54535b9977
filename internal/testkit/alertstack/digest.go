package alertstack

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/wait"
)

// failureDigest repeats, as the very last lines of a failed test, what
// failed and where the test was. A failed stack test prints its
// timeline and then 40 lines of every process's log, and CI's record
// of a failure keeps only the lines just before "--- FAIL": without
// this, the message that says what failed is cut (TestFleetAlerts
// failed a landing CI that way, with nothing but a daemon's log left).
type failureDigest struct {
	mu       sync.Mutex
	failures []string
	// notes say what the test saw around them (scrape health).
	notes []string
}

// digestLines bounds what the digest repeats: the record keeps a dozen
// lines.
const digestLines = 6

// ReportFailuresLast registers the cleanup that prints the digest. Call
// it before starting anything whose cleanup logs (Start does): cleanups
// run last-registered first, so this one then prints after them all.
func (s *Stack) ReportFailuresLast(t *testing.T) {
	if s.digest == nil {
		s.digest = &failureDigest{}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		s.digest.mu.Lock()
		failures, notes := s.digest.failures, s.digest.notes
		s.digest.mu.Unlock()
		var b strings.Builder
		if len(failures) == 0 {
			// t.Fatal(err) of a step (a cgroup, a file), not a check.
			b.WriteString("FAILED, by a step the stack does not record: its message is above")
		} else {
			fmt.Fprintf(&b, "FAILED, repeated after the logs above: %d check(s) failed", len(failures))
		}
		for i, f := range failures {
			if i == digestLines {
				fmt.Fprintf(&b, "\n  ... and %d more, above", len(failures)-i)
				break
			}
			fmt.Fprintf(&b, "\n  %s", f)
		}
		if s.timeline != nil {
			if at, step, ok := s.timeline.lastMark(); ok {
				fmt.Fprintf(&b, "\n  last step: %s %s", s.Since(at), step)
			}
		}
		for _, n := range notes {
			fmt.Fprintf(&b, "\n  %s", n)
		}
		t.Log(b.String())
	})
}

// Errorf fails the test as t.Errorf does, and keeps the message for the
// digest printed at the end.
func (s *Stack) Errorf(t *testing.T, format string, args ...any) {
	t.Helper()
	s.record(fmt.Sprintf(format, args...))
	t.Errorf(format, args...)
}

// Fatalf fails and stops the test as t.Fatalf does, and keeps the
// message for the digest printed at the end.
func (s *Stack) Fatalf(t *testing.T, format string, args ...any) {
	t.Helper()
	s.record(fmt.Sprintf(format, args...))
	t.Fatalf(format, args...)
}

// WaitFor is the package's WaitFor, its time-out kept for the digest.
func (s *Stack) WaitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	wait.UntilWith(recordingTB{t, s}, wait.Options{Every: waitPoll}, what, timeout, cond)
}

// recordingTB is a test whose Fatalf the digest keeps: what a helper
// that takes a testing.TB (wait.UntilWith) fails with.
type recordingTB struct {
	*testing.T
	s *Stack
}

func (r recordingTB) Fatalf(format string, args ...any) {
	r.Helper()
	r.s.Fatalf(r.T, format, args...)
}

// noteForDigest keeps a line of context for the digest.
func (s *Stack) noteForDigest(line string) {
	if s.digest == nil {
		return
	}
	s.digest.mu.Lock()
	s.digest.notes = append(s.digest.notes, line)
	s.digest.mu.Unlock()
}

func (s *Stack) record(msg string) {
	if s.digest == nil {
		return
	}
	// One line each: the digest is read where lines are counted.
	if first, _, cut := strings.Cut(msg, "\n"); cut {
		msg = first + " [...]"
	}
	s.digest.mu.Lock()
	s.digest.failures = append(s.digest.failures, msg)
	s.digest.mu.Unlock()
}
