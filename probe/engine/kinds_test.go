package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

func TestSharedFileWritesAndReadsEverySegment(t *testing.T) {
	target := t.TempDir()
	p := probe.ProbeConfig{Name: "ior", Kind: probe.KindSharedFile, Workers: 3, BlockSize: 64 << 10, SegmentSize: 512 << 10, Interval: time.Minute, Timeout: 30 * time.Second}
	res := Execute(context.Background(), probefixture.Request(target, p))
	if !res.OK() {
		t.Fatalf("%s: %s", res.Reason, res.Error)
	}
	for _, op := range []string{"write", "read"} {
		o := res.Op(op)
		if o == nil || o.Bytes != 3*512<<10 || o.Operations != 3*8 || o.Latency.Count != 24 || o.BytesPerSecond() <= 0 {
			t.Errorf("%s: %+v", op, o)
		}
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestMetadataTouchesEveryFileInEveryPhase(t *testing.T) {
	for _, size := range []int64{0, 4096} {
		t.Run(probe.FormatSize(size), func(t *testing.T) {
			target := t.TempDir()
			p := probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 3, Files: 200, FileSize: size, Interval: time.Minute, Timeout: 30 * time.Second}
			res := Execute(context.Background(), probefixture.Request(target, p))
			if !res.OK() {
				t.Fatalf("%s: %s", res.Reason, res.Error)
			}
			for _, op := range []string{"create", "stat", "read", "remove"} {
				o := res.Op(op)
				if o == nil {
					t.Fatalf("no %s result", op)
				}
				if o.Operations != 600 || o.Latency.Count != 600 || o.OperationsPerSecond() <= 0 {
					t.Errorf("%s: %d ops (%d latencies), want 600 each", op, o.Operations, o.Latency.Count)
				}
				wantBytes := int64(0)
				if op == "create" || op == "read" {
					wantBytes = 600 * size
				}
				if o.Bytes != wantBytes {
					t.Errorf("%s moved %d bytes, want %d", op, o.Bytes, wantBytes)
				}
			}
			if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// A file changed behind the probe's back between phases must fail the run,
// not be counted: the stat and read phases check what they find.
func TestMetadataDetectsWrongSizes(t *testing.T) {
	if err := mdStat(-1, "x", 0); err == nil {
		t.Fatal("stat of a bad descriptor succeeded")
	}
	dir := t.TempDir()
	fd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	dirfd := int(fd.Fd())
	if err := mdCreate(dirfd, "f0", []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := mdStat(dirfd, "f0", 4); err == nil || !strings.Contains(err.Error(), "size 3, want 4") {
		t.Errorf("stat with wrong size: %v", err)
	}
	if err := mdRead(dirfd, "f0", 2, make([]byte, 3)); err == nil {
		t.Error("read of a file longer than expected succeeded")
	}
	if err := mdRead(dirfd, "f0", 4, make([]byte, 5)); err == nil {
		t.Error("read of a short file succeeded")
	}
	if err := mdRead(dirfd, "f0", 3, make([]byte, 4)); err != nil {
		t.Errorf("read of the right size: %v", err)
	}
}

func TestColdReadReadsOnlyOldGenerations(t *testing.T) {
	target := t.TempDir()
	p := probefixture.SmallSeq("cold")
	p.ReadAfter = 300 * time.Millisecond
	p.Interval = 100 * time.Millisecond // bound: ceil(300/100)+2 = 5 generations
	keep := filepath.Join(target, "node1", "keep.cold")
	run := func() *probe.Result {
		res := Execute(context.Background(), probefixture.Request(target, p))
		if !res.OK() {
			t.Fatalf("%s: %s", res.Reason, res.Error)
		}
		return res
	}
	first := run()
	if first.Op("read") != nil || first.Op("write") == nil {
		t.Fatalf("first run has no generation old enough to read, yet reported %+v", first.Ops)
	}
	gens, _ := filepath.Glob(filepath.Join(keep, "d*"))
	if len(gens) != 1 {
		t.Fatalf("want one kept generation, got %v", gens)
	}
	time.Sleep(p.ReadAfter) // the generation must age; nothing to poll for
	second := run()
	if r := second.Op("read"); r == nil || r.Bytes != 2<<20 {
		t.Fatalf("second run should read the aged generation: %+v", second.Ops)
	}
	if _, err := os.Stat(gens[0]); !os.IsNotExist(err) {
		t.Errorf("the generation read was not removed: %v", err)
	}
	for i := 0; i < 8; i++ {
		run()
	}
	gens, _ = filepath.Glob(filepath.Join(keep, "d*"))
	if len(gens) > maxGenerations(&p) {
		t.Errorf("%d generations kept, bound is %d", len(gens), maxGenerations(&p))
	}
	// A probe removed from the config loses its kept files at the next run
	// of any probe of the target.
	other := probefixture.SmallSeq("other")
	req := probefixture.Request(target, other)
	req.Probes = []string{"other"}
	if res := Execute(context.Background(), req); !res.OK() {
		t.Fatal(res.Error)
	}
	if _, err := os.Stat(keep); !os.IsNotExist(err) {
		t.Errorf("keep directory of a removed probe survived: %v", err)
	}
}
