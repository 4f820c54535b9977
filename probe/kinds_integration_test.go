//go:build integration

package probe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestIntegrationKindsOnLoopExt4AndTmpfs(t *testing.T) {
	ext4, _ := mountLoop(t, "ext4", 1<<30)
	tmpfs := mountTmpfs(t, "512m")
	probes := []ProbeConfig{
		{Name: "seq", Kind: KindSequential, Workers: 2, FileSize: 32 << 20, BlockSize: 4 << 20},
		{Name: "shared", Kind: KindSharedFile, Workers: 4, BlockSize: 1 << 20, SegmentSize: 16 << 20},
		{Name: "md", Kind: KindMetadata, Workers: 2, Files: 512},
		{Name: "md4k", Kind: KindMetadata, Workers: 2, Files: 512, FileSize: 4096},
	}
	for _, fs := range []struct {
		name, path string
		direct     bool
	}{{"ext4", ext4, true}, {"tmpfs", tmpfs, false}} {
		for _, p := range probes {
			t.Run(fs.name+"/"+p.Name, func(t *testing.T) {
				p.Interval, p.Timeout = time.Minute, 50*time.Second
				res := Execute(context.Background(), request(fs.path, p))
				if !res.OK() {
					t.Fatalf("%s: %s", res.Reason, res.Error)
				}
				for _, op := range OpsOf(p.Kind) {
					o := res.Op(op)
					if o == nil || o.OperationsPerSecond() <= 0 {
						t.Fatalf("%s: no rate: %+v", op, o)
					}
				}
				if p.Kind != KindMetadata && res.Direct != fs.direct {
					t.Errorf("direct = %v on %s", res.Direct, fs.name)
				}
				if left := probeDirEntries(t, fs.path); len(left) != 0 {
					t.Errorf("left behind: %v", left)
				}
			})
		}
	}
}

func TestIntegrationENOSPCLeavesNothing(t *testing.T) {
	mnt, _ := mountLoop(t, "ext4", 32<<20)
	for _, p := range []ProbeConfig{
		{Name: "seq", Kind: KindSequential, Workers: 2, FileSize: 64 << 20, BlockSize: 4 << 20},
		{Name: "md4k", Kind: KindMetadata, Workers: 2, Files: 8192, FileSize: 4096},
	} {
		p.Interval, p.Timeout = time.Minute, 50*time.Second
		res := Execute(context.Background(), request(mnt, p))
		if res.Reason != ReasonENOSPC {
			t.Fatalf("%s on a full file system: reason %q (%s), want enospc", p.Name, res.Reason, res.Error)
		}
		if left := probeDirEntries(t, mnt); len(left) != 0 {
			t.Fatalf("%s: ENOSPC run left %v", p.Name, left)
		}
	}
}

func TestIntegrationEROFSLeavesNothing(t *testing.T) {
	mnt, dev := mountLoop(t, "ext4", 128<<20)
	p := smallSeq("seq")
	if res := Execute(context.Background(), request(mnt, p)); !res.OK() {
		t.Fatalf("first run: %s", res.Error)
	}
	run(t, "mount", "-o", "remount,ro", dev, mnt)
	res := Execute(context.Background(), request(mnt, p))
	if res.Reason != ReasonEROFS {
		t.Fatalf("read-only file system: reason %q (%s), want erofs", res.Reason, res.Error)
	}
	run(t, "mount", "-o", "remount,rw", dev, mnt)
	if left := probeDirEntries(t, mnt); len(left) != 0 {
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
	req := request(mnt, smallSeq("seq"))
	req.MinFreeRatio = 0.05
	res := Execute(context.Background(), req)
	if res.Skipped != SkipMinFree || !strings.Contains(res.Error, "below min_free_ratio") {
		t.Fatalf("nearly full file system: %+v, want skipped=min_free", res)
	}
	store := NewStore()
	p := req.Probe
	store.Configure(&Config{Targets: []*Target{{Name: "t", Probes: []*ProbeConfig{&p}}}}, nil)
	store.Record(Outcome{Result: res})
	if got := counterValue(t, store, "plateau_probe_runs_total", map[string]string{"result": ResultSkipped}); got != 1 {
		t.Errorf("runs_total{result=skipped} = %v", got)
	}
	if got := counterValue(t, store, "plateau_probe_skips_total", map[string]string{"reason": SkipMinFree}); got != 1 {
		t.Errorf("skips_total{reason=min_free} = %v", got)
	}
	req.MinFreeRatio = 0.01
	if res := Execute(context.Background(), req); !res.OK() {
		t.Fatalf("with min_free_ratio below the free space the probe must run: %s", res.Error)
	}
}
