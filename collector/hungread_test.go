package collector

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// What the two Lustre collectors' hung-read tests share: a FIFO no one
// writes in place of a parameter file, whose open blocks as a read of an
// evicted client's or a wedged server's file does, and the promise checked
// once the first scrape has returned without it.

// hungFIFO puts a FIFO in place of the file at path and returns what gives
// the blocked reader EOF (a writer that opens and closes); it also runs at
// clean-up, so that no reader is left blocked when the test fails.
func hungFIFO(t *testing.T, path string) (release func()) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Errorf("open the FIFO for writing: %v", err)
			return
		}
		unix.Close(fd)
	}
	t.Cleanup(release)
	return release
}

// runningKeys lists the keys of the calls g has started that have not
// returned.
func runningKeys[T any](g *stuckCalls[T]) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var keys []string
	for k := range g.running {
		keys = append(keys, k)
	}
	return keys
}

// gaugeIn is the value of the series name (one without labels) among ms.
func gaugeIn(t *testing.T, ms []prometheus.Metric, name string) float64 {
	t.Helper()
	for _, m := range ms {
		if strings.Contains(m.Desc().String(), `"`+name+`"`) {
			return metricValue(t, m)
		}
	}
	t.Fatalf("no %s in the round", name)
	return 0
}

// hungRead is a collector whose read of fifo is blocked after its first
// scrape.
type hungRead struct {
	// began is when the first scrape started.
	began    time.Time
	reg      *prometheus.Registry
	timeout  time.Duration
	fifo     string
	stuckKey string
	release  func()
	running  func() []string
	// stuckReads runs a round and returns its <subsystem>_stuck_reads.
	stuckReads func() float64
	metric     string
	// recovered is what the file holds once the read has returned.
	recovered string
}

// checkHungRead checks a first scrape that returned without the blocked
// read, by the round's deadline, and what follows: later rounds neither
// wait for it nor start it again, a scrape does not wait, and once it
// returns the next round reads the file again and nothing is left running.
func checkHungRead(t *testing.T, h hungRead) {
	t.Helper()
	if d := time.Since(h.began); d > h.timeout+time.Second {
		t.Errorf("first scrape took %s, want the round's deadline (%s) at most", d, h.timeout)
	}
	if keys := h.running(); len(keys) != 1 || keys[0] != h.stuckKey {
		t.Fatalf("reads still running: %v, want only %s", keys, h.stuckKey)
	}
	for i := 0; i < 3; i++ {
		begin := time.Now()
		got := h.stuckReads()
		if d := time.Since(begin); d > h.timeout/2 {
			t.Errorf("round %d took %s: it waited for the read that is still blocked", i+2, d)
		}
		if keys := h.running(); len(keys) != 1 || keys[0] != h.stuckKey {
			t.Fatalf("round %d: reads running %v, want only the one stuck read %s", i+2, keys, h.stuckKey)
		}
		if got != 1 {
			t.Errorf("round %d: %s %v, want 1", i+2, h.metric, got)
		}
	}
	begin := time.Now()
	if _, err := h.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > h.timeout/2 {
		t.Errorf("scrape while the read is stuck took %s", d)
	}

	h.release()
	probetest.WaitUntil(t, "the blocked read to return", 5*time.Second, func() bool { return len(h.running()) == 0 })
	if err := os.Remove(h.fifo); err != nil {
		t.Fatal(err)
	}
	benchWrite(t, h.fifo, h.recovered)
	if got := h.stuckReads(); got != 0 {
		t.Errorf("after the read returned: %s %v, want 0", h.metric, got)
	}
	if keys := h.running(); len(keys) != 0 {
		t.Errorf("reads left running: %v", keys)
	}
}
