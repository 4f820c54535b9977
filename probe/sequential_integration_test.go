//go:build integration

package probe

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// infoAfterRun runs a probe through a real worker process and returns the
// result and the plateau_probe_info series the daemon would export.
func infoAfterRun(t *testing.T, path string) (*Result, string) {
	t.Helper()
	p := ProbeConfig{Name: "seq", Kind: KindSequential, Workers: 2, FileSize: 32 << 20, BlockSize: 4 << 20, Interval: time.Minute, Timeout: 50 * time.Second}
	tg := &Target{Name: "t", Path: path, Probes: []*ProbeConfig{&p}}
	store := NewStore()
	store.Configure(&Config{Targets: []*Target{tg}}, nil)
	runner := &WorkerRunner{Command: []string{os.Args[0]}, Env: []string{workerEnv + "=1"}, Logger: log.NewNopLogger()}
	out := runner.Run(context.Background(), NewRequest(tg, &p, "node1"))
	if !out.Result.OK() {
		t.Fatalf("probe on %s failed: %s: %s", path, out.Result.Reason, out.Result.Error)
	}
	store.Record(out)
	for _, op := range []string{"write", "read"} {
		if o := out.Result.Op(op); o == nil || o.BytesPerSecond() <= 0 || o.Bytes != 64<<20 {
			t.Fatalf("%s result %+v", op, o)
		}
	}
	if left := probeDirEntries(t, path); len(left) != 0 {
		t.Fatalf("run left %v behind", left)
	}
	metrics, err := testutil.CollectAndFormat(store, expfmt.TypeTextPlain, "plateau_probe_info")
	if err != nil {
		t.Fatal(err)
	}
	return out.Result, string(metrics)
}

func TestIntegrationSequentialDirectOnLoopExt4(t *testing.T) {
	mnt, _ := mountLoop(t, "ext4", 512<<20)
	res, info := infoAfterRun(t, mnt)
	if !res.Direct || !strings.Contains(info, `direct="true"`) {
		t.Fatalf("ext4 on a loop device must run with O_DIRECT: %s", info)
	}
	t.Logf("ext4 loop: write %.0f MB/s, read %.0f MB/s", res.Op("write").BytesPerSecond()/1e6, res.Op("read").BytesPerSecond()/1e6)
}

func TestIntegrationSequentialDirectOnLoopXFS(t *testing.T) {
	mnt, _ := mountLoop(t, "xfs", 512<<20)
	res, info := infoAfterRun(t, mnt)
	if !res.Direct || !strings.Contains(info, `direct="true"`) {
		t.Fatalf("xfs on a loop device must run with O_DIRECT: %s", info)
	}
}

func TestIntegrationSequentialBufferedOnTmpfs(t *testing.T) {
	mnt := mountTmpfs(t, "256m")
	res, info := infoAfterRun(t, mnt)
	if res.Direct || !strings.Contains(info, `direct="false"`) {
		t.Fatalf("tmpfs has no device below it; the probe must say direct=false: %s", info)
	}
}
