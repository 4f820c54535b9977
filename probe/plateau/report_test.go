package plateau

import (
	"bytes"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// probeReportFixture is the report of a sequential probe measured below
// its plateau, a metadata probe without baselines, and a probe that
// failed.
func probeReportFixture(t *testing.T) *ProbeReport {
	t.Helper()
	b, err := ParseBaselines([]byte(`targets:
  scratch:
    seq:
      kind: sequential
      params: "sequential workers=1 file_size=4MiB block_size=1MiB"
      ops:
        write: {bytes_per_second: 2147483648}
        read: {bytes_per_second: 4294967296}
`), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	tg := &probe.Target{Name: "scratch", WarningRatio: 0.8, CriticalRatio: 0.5}
	seq := &probe.ProbeConfig{Name: "seq", Kind: probe.KindSequential, Workers: 1, FileSize: 4 << 20, BlockSize: 1 << 20}
	md := &probe.ProbeConfig{Name: "md", Kind: probe.KindMetadata, Workers: 1, Files: 64}
	var r ProbeReport
	r.Add(tg, seq, &probe.Result{Engine: probe.EngineSync, Ops: []probe.OpResult{
		{Op: "write", Bytes: 1 << 30, Seconds: 1},
		{Op: "read", Bytes: 4 << 30, Seconds: 1},
	}}, b)
	r.Add(tg, md, &probe.Result{Engine: probe.EngineSync, Ops: []probe.OpResult{{Op: "stat", Operations: 12345, Seconds: 1}}}, b)
	r.Add(tg, seq, &probe.Result{Reason: "eio", Error: "input/output error"}, b)
	return &r
}

func TestProbeReportTable(t *testing.T) {
	r := probeReportFixture(t)
	var out bytes.Buffer
	r.WriteTable(&out)
	want := `TARGET   PROBE  OP     RESULT        PLATEAU  RATIO  VERDICT
scratch  seq    write  1 GiB/s       2 GiB/s  0.50   warning
scratch  seq    read   4 GiB/s       4 GiB/s  1.00   ok
scratch  md     stat   12.3 K ops/s  -        -      no-baseline
scratch  seq    -      -             -        -      failed: eio: input/output error
`
	if out.String() != want {
		t.Errorf("table\n%s\nwant\n%s", out.String(), want)
	}
	if got := r.Worst(); got != VerdictFailed {
		t.Errorf("worst %q, want failed", got)
	}
	r.Ops = r.Ops[:3]
	if got := r.Worst(); got != VerdictWarning {
		t.Errorf("worst without the failed run %q, want warning", got)
	}
}

// The JSON is read by scripts: its names and layout are fixed.
func TestProbeReportJSON(t *testing.T) {
	var out bytes.Buffer
	if err := probeReportFixture(t).WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	// Written by the probe command before its report moved here.
	want := strings.TrimPrefix(`
[
  {
    "target": "scratch",
    "probe": "seq",
    "kind": "sequential",
    "op": "write",
    "unit": "bytes_per_second",
    "value": 1073741824,
    "baseline": 2147483648,
    "ratio": 0.5,
    "warning_ratio": 0.8,
    "critical_ratio": 0.5,
    "verdict": "warning",
    "direct": false,
    "engine": "sync"
  },
  {
    "target": "scratch",
    "probe": "seq",
    "kind": "sequential",
    "op": "read",
    "unit": "bytes_per_second",
    "value": 4294967296,
    "baseline": 4294967296,
    "ratio": 1,
    "warning_ratio": 0.8,
    "critical_ratio": 0.5,
    "verdict": "ok",
    "direct": false,
    "engine": "sync"
  },
  {
    "target": "scratch",
    "probe": "md",
    "kind": "metadata",
    "op": "stat",
    "unit": "operations_per_second",
    "value": 12345,
    "warning_ratio": 0.8,
    "critical_ratio": 0.5,
    "verdict": "no-baseline",
    "direct": false,
    "engine": "sync",
    "note": "no baseline"
  },
  {
    "target": "scratch",
    "probe": "seq",
    "kind": "sequential",
    "warning_ratio": 0.8,
    "critical_ratio": 0.5,
    "verdict": "failed",
    "direct": false,
    "error": "eio: input/output error"
  }
]
`, "\n")
	if out.String() != want {
		t.Errorf("JSON\n%s\nwant\n%s", out.String(), want)
	}
}
