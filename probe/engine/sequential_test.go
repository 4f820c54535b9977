package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// eachMeasuredOp fails the test unless res succeeded with a result for
// each of ops whose latency histogram counts every request, and calls
// check with each result, in order: what every data probe's run reports.
func eachMeasuredOp(t *testing.T, res *probe.Result, ops []string, check func(op string, o *probe.OpResult)) {
	t.Helper()
	if !res.OK() {
		t.Fatalf("run failed: %s: %s", res.Reason, res.Error)
	}
	for _, op := range ops {
		o := res.Op(op)
		if o == nil {
			t.Fatalf("no %s result in %+v", op, res.Ops)
		}
		if o.Latency == nil || o.Latency.Count != uint64(o.Operations) {
			t.Errorf("%s: latency histogram must count every request (%d): %+v", op, o.Operations, o.Latency)
		}
		check(op, o)
	}
}

func TestSequentialMeasuresEveryByteAndCleansUp(t *testing.T) {
	target := t.TempDir()
	p := probefixture.SmallSeq("s")
	res := Execute(context.Background(), probefixture.Request(target, p))
	eachMeasuredOp(t, res, []string{"write", "read"}, func(op string, o *probe.OpResult) {
		if o.Bytes != int64(p.Workers)*p.FileSize || o.Operations != int64(p.Workers)*p.FileSize/p.BlockSize {
			t.Errorf("%s moved %d bytes in %d ops, want %d in %d", op, o.Bytes, o.Operations, int64(p.Workers)*p.FileSize, int64(p.Workers)*p.FileSize/p.BlockSize)
		}
		if o.Seconds <= 0 || o.BytesPerSecond() <= 0 {
			t.Errorf("%s: no time measured: %+v", op, o)
		}
	})
	if res.Engine != "sync" {
		t.Errorf("engine = %q", res.Engine)
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
		t.Errorf("run left files behind: %v", left)
	}
	if fi, err := os.Stat(filepath.Join(target, "node1")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("probe directory mode = %v, %v; want 0700", fi.Mode(), err)
	}
}

func TestSequentialTimeoutCleansUp(t *testing.T) {
	target := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := Execute(ctx, probefixture.Request(target, probefixture.SmallSeq("s")))
	if res.Reason != probe.ReasonTimeout {
		t.Fatalf("cancelled run: reason %q (%s), want timeout", res.Reason, res.Error)
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
		t.Errorf("timed-out run left files behind: %v", left)
	}
}

func TestDataIsUniquePerChunk(t *testing.T) {
	buf := alignedBuffer(64<<10, 4096)
	if uintptrOf(buf)%4096 != 0 {
		t.Fatal("buffer not aligned")
	}
	fillIncompressible(buf, 1)
	seen := map[string]bool{}
	for off := int64(0); off < 4*int64(len(buf)); off += int64(len(buf)) {
		stamp(buf, 99, 0, off)
		for i := 0; i < len(buf); i += stampChunk {
			chunk := string(buf[i : i+stampChunk])
			if seen[chunk] {
				t.Fatalf("chunk at %d repeats: storage dedupe would flatter the probe", off+int64(i))
			}
			seen[chunk] = true
		}
	}
}
