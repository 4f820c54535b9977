//go:build integration

package engine_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/store"
	"github.com/plateau-exporter/plateau_exporter/probe/worker"
)

// infoAfterRun runs a probe through a real worker process and returns the
// result and the plateau_probe_info series the daemon would export.
func infoAfterRun(t *testing.T, path string) (*probe.Result, string) {
	t.Helper()
	p := probe.ProbeConfig{Name: "seq", Kind: probe.KindSequential, Workers: 2, FileSize: 32 << 20, BlockSize: 4 << 20, Interval: time.Minute, Timeout: 50 * time.Second}
	tg := &probe.Target{Name: "t", Path: path, Probes: []*probe.ProbeConfig{&p}}
	results := store.New()
	results.Configure(&probe.Config{Targets: []*probe.Target{tg}}, nil)
	runner := &worker.ProcessRunner{Command: []string{os.Args[0]}, Env: []string{workerEnv + "=1"}, Logger: log.NewNopLogger()}
	out := runner.Run(context.Background(), probe.NewRequest(tg, &p, "node1"))
	if !out.Result.OK() {
		t.Fatalf("probe on %s failed: %s: %s", path, out.Result.Reason, out.Result.Error)
	}
	results.Record(out.Result, out.TimedOut)
	for _, op := range []string{"write", "read"} {
		if o := out.Result.Op(op); o == nil || o.BytesPerSecond() <= 0 || o.Bytes != 64<<20 {
			t.Fatalf("%s result %+v", op, o)
		}
	}
	if left := probetest.ProbeDirEntries(t, path); len(left) != 0 {
		t.Fatalf("run left %v behind", left)
	}
	metrics, err := testutil.CollectAndFormat(results, expfmt.TypeTextPlain, "plateau_probe_info")
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
