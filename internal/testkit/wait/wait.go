// Package wait polls a condition until it holds or a deadline passes: the
// one way plateau_exporter's tests wait. Tests wait for states, never for
// fixed times: a loaded two-core machine is slow, and the tests assert
// that a state comes, not how fast. Only tests import it.
package wait

import (
	"testing"
	"time"
)

// DefaultPoll is how often Until looks.
const DefaultPoll = 25 * time.Millisecond

// Options say how a wait polls. The zero value polls every DefaultPoll.
type Options struct {
	// Every is the time between two looks. A test that measures the
	// machine while it waits polls slowly: on two cores, a scrape every
	// 25ms takes CPU from the very probe whose rate it then compares.
	Every time.Duration
}

// Until polls cond until it holds, failing the test at the deadline with
// what it waited for and the last error cond gave (cond may return a nil
// error while it waits).
func Until(t testing.TB, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	UntilWith(t, Options{}, what, timeout, cond)
}

// UntilWith is Until polling as o says.
func UntilWith(t testing.TB, o Options, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	every := o.Every
	if every <= 0 {
		every = DefaultPoll
	}
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			lastErr = err
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every)
	}
}

// Bool adapts a condition without an error to Until's.
func Bool(cond func() bool) func() (bool, error) {
	return func() (bool, error) { return cond(), nil }
}
