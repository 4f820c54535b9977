package worker

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// syncBuffer is a log sink the runner may write from its goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A hostile or broken worker floods both pipes: 50 MB on stdout, 5 MB on
// stderr. The runner must keep at most its caps (8 MiB and 64 KiB), drain
// the rest so the worker is not left blocked on a full pipe, fail the run
// with a bounded error and log a bounded line.
func TestWorkerFloodedPipesAreCapped(t *testing.T) {
	logs := &syncBuffer{}
	r := &ProcessRunner{
		Command: []string{"/bin/sh", "-c", "head -c 52428800 /dev/zero; yes $(printf %01023d 0) | head -c 5242880 >&2"},
		Logger:  log.NewLogfmtLogger(logs), KillGrace: 10 * time.Second,
	}
	p := probefixture.SmallSeq("s")
	p.Timeout = 60 * time.Second
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := r.Run(context.Background(), probefixture.Request(t.TempDir(), p))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d MiB while the worker printed 50 MB + 5 MB; log %d bytes; error %d bytes", allocated>>20, len(logs.String()), len(out.Result.Error))
	if allocated > 24<<20 {
		t.Errorf("runner allocated %d MiB for a worker's output capped at 8 MiB + 64 KiB", allocated>>20)
	}
	if out.TimedOut || out.Result.OK() {
		t.Fatalf("want a failed run (output too large), got %+v", out)
	}
	if !strings.Contains(out.Result.Error, errOutputTooLarge.Error()) {
		t.Errorf("error %q does not say the output was too large", probe.BoundText(out.Result.Error, 300))
	}
	if n := len(out.Result.Error); n > probe.MaxErrorText {
		t.Errorf("error text is %d bytes", n)
	}
	if n := len(logs.String()); n > 16<<10 {
		t.Errorf("log is %d bytes for one run", n)
	}
}

// The stderr a failing worker leaves ends with its reason: that end is
// kept, and a worker printing more than the cap is not blocked by it.
func TestWorkerStderrKeepsTail(t *testing.T) {
	r := &ProcessRunner{Command: []string{"/bin/sh", "-c", "head -c 5242880 /dev/zero >&2; echo >&2; echo the real reason >&2; exit 3"}, Logger: log.NewNopLogger()}
	out := r.Run(context.Background(), probefixture.Request(t.TempDir(), probefixture.SmallSeq("s")))
	if !strings.Contains(out.Result.Error, "the real reason") {
		t.Errorf("error %q lost the end of stderr", probe.BoundText(out.Result.Error, 300))
	}
}

func TestCappedBuffers(t *testing.T) {
	h := &headBuffer{limit: 10}
	for _, s := range []string{"0123", "456789ab", "cd"} {
		if n, err := h.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if string(h.Bytes()) != "0123456789" || h.dropped != 4 {
		t.Errorf("head %q dropped %d", h.Bytes(), h.dropped)
	}
	tl := &tailBuffer{limit: 5}
	for _, s := range []string{"abc", "defg", "hijklmnop", "q"} {
		_, _ = tl.Write([]byte(s))
	}
	if tl.String() != "mnopq" || tl.dropped != 12 {
		t.Errorf("tail %q dropped %d", tl.String(), tl.dropped)
	}
}

// Stopping a run (the daemon's SIGTERM, Ctrl-C of probe) gives the
// worker its own clean SIGTERM path: the files of the run are removed.
func TestWorkerStopLeavesNoFiles(t *testing.T) {
	target := t.TempDir()
	p := probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 2, Files: 200000, Interval: time.Hour, Timeout: 10 * time.Minute}
	r := testRunner()
	r.StopGrace = 20 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Outcome, 1)
	go func() { done <- r.Run(ctx, probefixture.Request(target, p)) }()
	probetest.WaitUntil(t, "the run to create files", 60*time.Second, func() bool {
		return countFiles(filepath.Join(target, "node1")) > 1000
	})
	cancel()
	select {
	case out := <-done:
		if out.Stuck != nil {
			t.Fatalf("worker stuck: %+v", out)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("stopped run did not return")
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
		t.Errorf("stopped run left %d entries in the probe directory (%d files below): %v", len(left), countFiles(filepath.Join(target, "node1")), left[:min(len(left), 5)])
	}
}

// A worker that ignores SIGTERM is still killed after its grace.
func TestWorkerStopKillsAfterGrace(t *testing.T) {
	r := &ProcessRunner{Command: []string{"/bin/sh", "-c", "trap '' TERM; sleep 300 & wait; wait"}, Logger: log.NewNopLogger(), StopGrace: 500 * time.Millisecond, KillGrace: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	start := time.Now()
	out := r.Run(ctx, probefixture.Request(t.TempDir(), probefixture.SmallSeq("s")))
	if out.Stuck != nil || out.Result.OK() || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("outcome %+v", out)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("stop took %s with a 500ms grace", took)
	}
}

func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(string, os.DirEntry, error) error { n++; return nil })
	return n
}
