package faultfs

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// testTimeout bounds waits for goroutines to reach a state; the tests
// assert the state, never how fast it came.
const testTimeout = 30 * time.Second

// timeoutCtx is a context that ends after d and at the end of the test.
func timeoutCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitExactlyBlocked waits until exactly n requests are blocked in g,
// failing the test at ctx's end.
func waitExactlyBlocked(t *testing.T, ctx context.Context, g *gate, n int) {
	t.Helper()
	if err := g.waitBlocked(ctx, strconv.Itoa(n), func(b int) bool { return b == n }); err != nil {
		t.Fatal(err)
	}
}

// enterAsync runs one request through g on its own goroutine, as go-fuse
// does, and delivers its result.
func enterAsync(ctx context.Context, g *gate, op Op) <-chan syscall.Errno {
	out := make(chan syscall.Errno, 1)
	go func() { out <- g.enter(ctx, op, classOf(op)) }()
	return out
}

func result(t *testing.T, ch <-chan syscall.Errno, what string) syscall.Errno {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(testTimeout):
		t.Fatalf("%s: request still waiting after %s", what, testTimeout)
	}
	return 0
}

func TestGateHangUntilSet(t *testing.T) {
	for _, tc := range []struct {
		next Mode
		want syscall.Errno
	}{
		{Normal(), 0},
		{Stale(), syscall.ESTALE},
		{FailWriteENOSPC(), syscall.ENOSPC},
		{FailReadEIO(), 0}, // a write is not a read
	} {
		t.Run(tc.next.String(), func(t *testing.T) {
			g := newGate(Hang())
			ctx := timeoutCtx(t, testTimeout)
			a := enterAsync(context.Background(), g, OpWrite)
			b := enterAsync(context.Background(), g, OpWrite)
			waitExactlyBlocked(t, ctx, g, 2)
			select {
			case e := <-a:
				t.Fatalf("a hung request returned %v before the mode changed", e)
			default:
			}
			g.set(tc.next)
			if e := result(t, a, "first"); e != tc.want {
				t.Errorf("first request after switching to %s: %v, want %v", tc.next, e, tc.want)
			}
			if e := result(t, b, "second"); e != tc.want {
				t.Errorf("second request after switching to %s: %v, want %v", tc.next, e, tc.want)
			}
			waitExactlyBlocked(t, ctx, g, 0)
			if g.ops() != 2 || g.count(OpWrite) != 2 || g.interrupts() != 0 {
				t.Errorf("counters: ops=%d write=%d interrupted=%d", g.ops(), g.count(OpWrite), g.interrupts())
			}
		})
	}
}

// TestGateHangStaysThroughOtherHang: switching from one waiting mode to
// another keeps the request waiting.
func TestGateHangStaysThroughOtherHang(t *testing.T) {
	g := newGate(Hang())
	ctx := timeoutCtx(t, testTimeout)
	res := enterAsync(context.Background(), g, OpLookup)
	waitExactlyBlocked(t, ctx, g, 1)
	g.set(Latency(time.Hour))
	g.set(Hang())
	waitExactlyBlocked(t, ctx, g, 1)
	select {
	case e := <-res:
		t.Fatalf("request left the hang (%v) on a switch to another waiting mode", e)
	default:
	}
	g.set(Normal())
	if e := result(t, res, "released"); e != 0 {
		t.Errorf("released request: %v", e)
	}
}

// TestGateInterrupt: cancelling the request's context is what go-fuse
// does on FUSE_INTERRUPT; the request must leave with EINTR.
func TestGateInterrupt(t *testing.T) {
	for _, m := range []Mode{Hang(), Latency(time.Hour)} {
		t.Run(m.String(), func(t *testing.T) {
			g := newGate(m)
			ctx := timeoutCtx(t, testTimeout)
			reqCtx, interrupt := context.WithCancel(context.Background())
			res := enterAsync(reqCtx, g, OpRead)
			waitExactlyBlocked(t, ctx, g, 1)
			interrupt()
			if e := result(t, res, "interrupted"); e != syscall.EINTR {
				t.Errorf("interrupted request: %v, want EINTR", e)
			}
			if g.interrupts() != 1 || g.blockedNow() != 0 {
				t.Errorf("after interrupt: interrupted=%d blocked=%d", g.interrupts(), g.blockedNow())
			}
		})
	}
}

func TestGateLatency(t *testing.T) {
	const d = 50 * time.Millisecond
	g := newGate(Latency(d))
	start := time.Now()
	if e := g.enter(context.Background(), OpGetattr, classOf(OpGetattr)); e != 0 {
		t.Fatalf("delayed request: %v", e)
	}
	// Only a lower bound: a loaded machine may add any amount.
	if took := time.Since(start); took < d {
		t.Errorf("request under %s took %s", g.current(), took)
	}
	if g.blockedNow() != 0 {
		t.Errorf("blocked after the delay: %d", g.blockedNow())
	}
}

func TestGateLatencyCutShortBySet(t *testing.T) {
	g := newGate(Latency(time.Hour))
	res := enterAsync(context.Background(), g, OpStatfs)
	waitExactlyBlocked(t, timeoutCtx(t, testTimeout), g, 1)
	g.set(ReadOnly())
	if e := result(t, res, "statfs"); e != 0 {
		t.Errorf("statfs released into read-only: %v", e)
	}
}

func TestGateWaitBlockedTimesOut(t *testing.T) {
	g := newGate(Normal())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := g.waitBlocked(ctx, "at least 1", func(n int) bool { return n >= 1 })
	if err == nil {
		t.Fatal("waitBlocked returned nil with nothing blocked")
	}
	if ctx.Err() == nil {
		t.Fatalf("waitBlocked gave up before its context ended: %v", err)
	}
}

func TestGateCounts(t *testing.T) {
	g := newGate(FailReadEIO())
	ctx := context.Background()
	for _, op := range []Op{OpRead, OpRead, OpWrite, OpLookup} {
		g.enter(ctx, op, classOf(op))
	}
	if g.ops() != 4 || g.count(OpRead) != 2 || g.count(OpWrite) != 1 || g.count(OpLookup) != 1 || g.count(OpFsync) != 0 {
		t.Errorf("counts: total=%d read=%d write=%d lookup=%d fsync=%d",
			g.ops(), g.count(OpRead), g.count(OpWrite), g.count(OpLookup), g.count(OpFsync))
	}
}
