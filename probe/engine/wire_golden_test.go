package engine

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

var updateWire = flag.Bool("update-wire", false, "rewrite testdata/wire/*.json from the current types")

// TestWireFormatGolden pins the JSON that crosses the pipe between the
// daemon and its probe-worker children, byte for byte, so that moving the
// types between packages cannot change it unnoticed: a daemon and a worker
// from different builds must keep understanding each other.
func TestWireFormatGolden(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 52, 31, 123456789, time.UTC)
	lat := newLatencyRecorder()
	for _, s := range []float64{0.0004, 0.0021, 0.0021, 0.013, 0.25} {
		lat.Observe(s)
	}
	cases := map[string]any{
		"request.json": probe.Request{
			Target: "scratch", Path: "/gpfs/scratch/.plateau", CreatePath: true, Hostname: "node1", MinFreeRatio: 0.05,
			Probe: probe.ProbeConfig{Name: "rand", Kind: probe.KindRandom, FileSize: 1 << 30, BlockSize: 4 << 10, QueueDepth: 16,
				Duration: 5 * time.Second, Interval: 15 * time.Minute, Timeout: 2 * time.Minute, Splay: true, Line: 12},
			Probes: []string{"seq", "rand"},
		},
		"result.json": probe.Result{
			Target: "scratch", Probe: "rand", Kind: probe.KindRandom, Start: at, End: at.Add(5200 * time.Millisecond),
			Direct: true, Engine: "libaio", Swept: 1,
			Ops: []probe.OpResult{
				{Op: "read", Bytes: 4 << 20, Operations: 1024, Seconds: 2.5, Latency: lat.Snapshot()},
				{Op: "write", Bytes: 8 << 20, Operations: 2048, Seconds: 2.5},
			},
		},
		"result_failed.json": probe.Result{
			Target: "scratch", Probe: "seq", Kind: probe.KindSequential, Start: at, End: at.Add(time.Second),
			Reason: probe.ReasonENOSPC, Error: "probe scratch/seq: write f0: no space left on device",
		},
		"result_skipped.json": probe.Result{
			Target: "scratch", Probe: "seq", Kind: probe.KindSequential, Start: at, End: at,
			Skipped: probe.SkipMinFree, Error: "3.0% free is below min_free_ratio 5.0%",
		},
	}
	for name, v := range cases {
		// Compact, as json.Marshal and json.Encoder put it on the pipe.
		got, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", "wire", name)
		if *updateWire {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestWireFormatGolden -update-wire ./probe once to write it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the wire format changed:\n got %s\nwant %s", name, got, want)
		}
	}
}
