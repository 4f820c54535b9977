package probe

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// A failure's text is bounded wherever it is shown: its head and its
// tail (the cause) are kept, and the cut is said.
func TestResultErrorBounded(t *testing.T) {
	long := errors.New("sweep: " + strings.Repeat("foreign name é, ", 150000) + "cause: EIO")
	var r Result
	r.Fail(long)
	if len(r.Error) > MaxErrorText {
		t.Errorf("error text %d bytes, limit %d", len(r.Error), MaxErrorText)
	}
	if !strings.HasPrefix(r.Error, "sweep: ") || !strings.HasSuffix(r.Error, "cause: EIO") || !strings.Contains(r.Error, "bytes cut") {
		t.Errorf("bounded text lost its head, tail or mark: %.100s ... %s", r.Error, r.Error[len(r.Error)-60:])
	}
	if !utf8.ValidString(r.Error) {
		t.Error("bounded text is not valid UTF-8")
	}
}

func TestJoinErrorsBounded(t *testing.T) {
	var errs []error
	for i := 0; i < 100000; i++ {
		errs = append(errs, errors.New("unknown key"))
	}
	if msg := JoinErrors(errs).Error(); strings.Count(msg, "\n") != 20 || !strings.Contains(msg, "99980 more") {
		t.Errorf("joined: %q", msg)
	}
}
