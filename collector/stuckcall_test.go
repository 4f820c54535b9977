package collector

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// A call that hangs is remembered as stuck: the caller's wait ends at its
// own bound, a new call for the key is refused without being started, other
// keys are not held up, and once the hung call returns the key runs again.
func TestStuckCallsHungCall(t *testing.T) {
	var g stuckCalls[string]
	release := make(chan struct{})
	var calls atomic.Int32
	hang := func() string {
		calls.Add(1)
		<-release
		return "late"
	}

	first, err := g.start("nvme0", nil, hang)
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	select {
	case r := <-first:
		t.Fatalf("the hung call returned %q before it was released", r)
	case <-time.After(50 * time.Millisecond):
	}
	if !g.inFlight("nvme0") {
		t.Error("the hung call is not reported in flight")
	}

	if _, err := g.start("nvme0", nil, hang); !errors.Is(err, errStillRunning) {
		t.Errorf("second call while the first hangs: %v, want errStillRunning", err)
	}
	var stuck *stillRunningError
	if _, err := g.start("nvme0", nil, hang); !errors.As(err, &stuck) || stuck.key != "nvme0" || time.Since(stuck.started) < 50*time.Millisecond {
		t.Errorf("refusal %v does not say which call is stuck since when", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("call started %d times while the first hung, want 1", n)
	}

	other, err := g.start("nvme1", nil, func() string { return "ok" })
	if err != nil {
		t.Fatalf("another key while nvme0 hangs: %v", err)
	}
	if r := <-other; r != "ok" {
		t.Errorf("other key's result = %q, want ok", r)
	}

	close(release)
	if r := <-first; r != "late" {
		t.Errorf("hung call's result = %q, want late", r)
	}
	probetest.WaitUntil(t, "the returned call to be forgotten", 5*time.Second, func() bool { return !g.inFlight("nvme0") })
	again, err := g.start("nvme0", nil, func() string { calls.Add(1); return "again" })
	if err != nil {
		t.Fatalf("call after the hung one returned: %v", err)
	}
	if r := <-again; r != "again" || calls.Load() != 2 {
		t.Errorf("call after recovery = %q after %d calls, want again after 2", r, calls.Load())
	}
}

// begin's pid is what a refusal names; a begin that fails leaves the key
// free and runs no call.
func TestStuckCallsBegin(t *testing.T) {
	var g stuckCalls[error]
	startErr := errors.New("exec: no such file")
	called := false
	if _, err := g.start("mmpmon", func() (int, error) { return 0, startErr }, func() error { called = true; return nil }); !errors.Is(err, startErr) {
		t.Errorf("failed begin: %v, want its error", err)
	}
	if called || g.inFlight("mmpmon") {
		t.Errorf("a failed begin left the call run (%v) or in flight (%v)", called, g.inFlight("mmpmon"))
	}

	release := make(chan struct{})
	defer close(release)
	if _, err := g.start("mmpmon", func() (int, error) { return 4242, nil }, func() error { <-release; return nil }); err != nil {
		t.Fatal(err)
	}
	var stuck *stillRunningError
	_, err := g.start("mmpmon", func() (int, error) { t.Error("begin ran while the call hangs"); return 0, nil }, func() error { return nil })
	if !errors.As(err, &stuck) || stuck.pid != 4242 {
		t.Errorf("refusal %v, want one naming pid 4242", err)
	}
}

// Callers racing for one key: exactly one begins.
func TestStuckCallsOneBeginsPerKey(t *testing.T) {
	var g stuckCalls[struct{}]
	release := make(chan struct{})
	defer close(release)
	var begun, refused atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := g.start("k", func() (int, error) { begun.Add(1); return 0, nil }, func() struct{} { <-release; return struct{}{} })
			if errors.Is(err, errStillRunning) {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if begun.Load() != 1 || refused.Load() != 15 {
		t.Errorf("%d callers began and %d were refused, want 1 and 15", begun.Load(), refused.Load())
	}
}
