//go:build integration

package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/engine"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
)

func TestIntegrationKindsOnLoopExt4AndTmpfs(t *testing.T) {
	ext4, _ := mountLoop(t, "ext4", 1<<30)
	tmpfs := mountTmpfs(t, "512m")
	probes := []probe.ProbeConfig{
		{Name: "seq", Kind: probe.KindSequential, Workers: 2, FileSize: 32 << 20, BlockSize: 4 << 20},
		{Name: "shared", Kind: probe.KindSharedFile, Workers: 4, BlockSize: 1 << 20, SegmentSize: 16 << 20},
		{Name: "md", Kind: probe.KindMetadata, Workers: 2, Files: 512},
		{Name: "md4k", Kind: probe.KindMetadata, Workers: 2, Files: 512, FileSize: 4096},
	}
	for _, fs := range []struct {
		name, path string
		direct     bool
	}{{"ext4", ext4, true}, {"tmpfs", tmpfs, false}} {
		for _, p := range probes {
			t.Run(fs.name+"/"+p.Name, func(t *testing.T) {
				p.Interval, p.Timeout = time.Minute, 50*time.Second
				res := engine.Execute(context.Background(), probefixture.Request(fs.path, p))
				if !res.OK() {
					t.Fatalf("%s: %s", res.Reason, res.Error)
				}
				for _, op := range probe.OpsOf(p.Kind) {
					o := res.Op(op)
					if o == nil || o.OperationsPerSecond() <= 0 {
						t.Fatalf("%s: no rate: %+v", op, o)
					}
				}
				if p.Kind != probe.KindMetadata && res.Direct != fs.direct {
					t.Errorf("direct = %v on %s", res.Direct, fs.name)
				}
				if left := probetest.ProbeDirEntries(t, fs.path); len(left) != 0 {
					t.Errorf("left behind: %v", left)
				}
			})
		}
	}
}

func TestIntegrationENOSPCLeavesNothing(t *testing.T) {
	mnt, _ := mountLoop(t, "ext4", 32<<20)
	for _, p := range []probe.ProbeConfig{
		{Name: "seq", Kind: probe.KindSequential, Workers: 2, FileSize: 64 << 20, BlockSize: 4 << 20},
		{Name: "md4k", Kind: probe.KindMetadata, Workers: 2, Files: 8192, FileSize: 4096},
	} {
		p.Interval, p.Timeout = time.Minute, 50*time.Second
		res := engine.Execute(context.Background(), probefixture.Request(mnt, p))
		if res.Reason != probe.ReasonENOSPC {
			t.Fatalf("%s on a full file system: reason %q (%s), want enospc", p.Name, res.Reason, res.Error)
		}
		if left := probetest.ProbeDirEntries(t, mnt); len(left) != 0 {
			t.Fatalf("%s: ENOSPC run left %v", p.Name, left)
		}
	}
}

func TestIntegrationEROFSLeavesNothing(t *testing.T) {
	mnt, dev := mountLoop(t, "ext4", 128<<20)
	p := probefixture.SmallSeq("seq")
	if res := engine.Execute(context.Background(), probefixture.Request(mnt, p)); !res.OK() {
		t.Fatalf("first run: %s", res.Error)
	}
	run(t, "mount", "-o", "remount,ro", dev, mnt)
	res := engine.Execute(context.Background(), probefixture.Request(mnt, p))
	if res.Reason != probe.ReasonEROFS {
		t.Fatalf("read-only file system: reason %q (%s), want erofs", res.Reason, res.Error)
	}
	run(t, "mount", "-o", "remount,rw", dev, mnt)
	if left := probetest.ProbeDirEntries(t, mnt); len(left) != 0 {
		t.Fatalf("EROFS run left %v", left)
	}
}

func TestIntegrationMinFreeRatioSkips(t *testing.T) {
	mnt, _ := mountLoop(t, "ext4", 256<<20)
	var s unix.Statfs_t
	if err := unix.Statfs(mnt, &s); err != nil {
		t.Fatal(err)
	}
	// Fill the file system until about 3% stays free.
	fill := int64(s.Bavail)*int64(s.Bsize) - int64(s.Blocks)*int64(s.Bsize)*3/100
	f, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, fill); err != nil {
		t.Fatal(err)
	}
	f.Close()
	req := probefixture.Request(mnt, probefixture.SmallSeq("seq"))
	req.MinFreeRatio = 0.05
	res := engine.Execute(context.Background(), req)
	if res.Skipped != probe.SkipMinFree || !strings.Contains(res.Error, "below min_free_ratio") {
		t.Fatalf("nearly full file system: %+v, want skipped=min_free", res)
	}
	results := store.New()
	p := req.Probe
	results.Configure(&probe.Config{Targets: []*probe.Target{{Name: "t", Probes: []*probe.ProbeConfig{&p}}}}, nil)
	results.Record(res, false)
	if got := probetest.MetricValue(t, results, "plateau_probe_runs_total", map[string]string{"result": store.ResultSkipped}); got != 1 {
		t.Errorf("runs_total{result=skipped} = %v", got)
	}
	if got := probetest.MetricValue(t, results, "plateau_probe_skips_total", map[string]string{"reason": probe.SkipMinFree}); got != 1 {
		t.Errorf("skips_total{reason=min_free} = %v", got)
	}
	req.MinFreeRatio = 0.01
	if res := engine.Execute(context.Background(), req); !res.OK() {
		t.Fatalf("with min_free_ratio below the free space the probe must run: %s", res.Error)
	}
	// A metadata probe of empty files writes no data: it runs on the
	// nearly full file system; one that writes data skips.
	md := probefixture.Request(mnt, probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 1, Files: 16})
	md.MinFreeRatio = 0.05
	if res := engine.Execute(context.Background(), md); !res.OK() {
		t.Fatalf("metadata probe of empty files below min_free_ratio: %+v, want a run", res)
	}
	md.Probe.FileSize = 4 << 10
	if res := engine.Execute(context.Background(), md); res.Skipped != probe.SkipMinFree {
		t.Fatalf("metadata probe of 4 KiB files below min_free_ratio: %+v, want skipped=min_free", res)
	}
}
