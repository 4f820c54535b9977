//go:build integration

package main

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/slurmtest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// startSlurm starts a Slurm of the test's own with two nodes, n1 and n2,
// on this host's loopback (slurmtest). Both "nodes" share the host's page
// cache and file system, so a test checks that the fleet machinery works
// (the cyclic layout, the cross-node read shift, the node-class sample),
// never that reading another node's data defeats a client cache.
func startSlurm(t *testing.T) *slurmtest.Cluster {
	t.Helper()
	return slurmtest.Start(t, slurmtest.Options{Nodes: []slurmtest.Node{{Name: "n1"}, {Name: "n2"}}})
}

func TestIntegrationCharacterizeSlurmOnLoopExt4(t *testing.T) {
	probetest.RequireCommand(t, "promtool", "prometheus")
	// The loop device first, so that its cleanup (unmount) runs after
	// Slurm's, whose tasks may still hold it.
	loop := probetest.MountLoopIn(t, probetest.MemoryDir(t), "ext4", 512<<20)
	c := startSlurm(t)
	target := filepath.Join(loop.Mount, "plateau")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cfg := filepath.Join(dir, "plateau.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`defaults: {interval: 1m, timeout: 30s}
targets:
  - name: loop
    path: %s
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 16MiB, block_size: 1MiB}
      - {name: shared, kind: shared_file, workers: 2, block_size: 1MiB, segment_size: 8MiB}
      - {name: md, kind: metadata, workers: 1, files: 256}
baselines_file: %s/node-baselines.yml
`, target, dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := c.Command("salloc", "--nodes=2", "--exclusive", "--time=5", "--job-name=plateau-test",
		binary, "--config.file="+cfg, "characterize", "--slurm", "--max-workers=4", "--sample=2", "--runs=1", "--sweep-runs=1",
		"--slurm.start-delay=2s", "--output-dir="+out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	err := slurmtest.RunWithin(cmd, 150*time.Second)
	t.Logf("characterize --slurm took %s", time.Since(started).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("salloc characterize --slurm: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), slurmtest.LastLines(stderr.String(), 40))
	}
	text := stdout.String()
	t.Logf("stdout:\n%s", text)

	// The table: every op of the three probes with max (at a worker
	// count), sustained and knee.
	rows := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[0] == "loop" {
			rows[f[1]+"/"+f[3]] = line
		}
	}
	for name, kind := range map[string]string{"seq": probe.KindSequential, "shared": probe.KindSharedFile, "md": probe.KindMetadata} {
		for _, op := range probe.OpsOf(kind) {
			row, ok := rows[name+"/"+op]
			if !ok {
				t.Errorf("table has no row for %s %s", name, op)
				continue
			}
			if !strings.Contains(row, " at ") || !(strings.Contains(row, "workers=") || strings.Contains(row, "still rising at 4")) {
				t.Errorf("row %q lacks a max at a worker count or a knee", row)
			}
		}
	}
	if !strings.Contains(text, "node class loop/seq over 2 sampled node(s)") {
		t.Errorf("no node-class report for seq")
	}

	// The charts are XML with a curve.
	for _, p := range []string{"seq", "shared", "md"} {
		svg, err := os.ReadFile(filepath.Join(out, "loop_"+p+"_slurm.svg"))
		if err != nil {
			t.Error(err)
			continue
		}
		if err := xml.Unmarshal(svg, new(struct{})); err != nil {
			t.Errorf("%s chart is not XML: %v", p, err)
		}
		if !bytes.Contains(svg, []byte("<polyline")) {
			t.Errorf("%s chart has no curve", p)
		}
	}

	// The steps: every level of every op, on min(workers, 2) nodes, each
	// having moved tasks x its share.
	f, err := os.Open(filepath.Join(out, "slurm_steps.csv"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	share := map[string]int64{"seq": 16 << 20, "shared": 8 << 20, "md": 256}
	if want := 1 + 3*(2+2+4); len(recs) != want {
		t.Errorf("steps CSV has %d rows, want %d", len(recs), want)
	}
	for _, r := range recs[1:] {
		workers, _ := strconv.Atoi(r[4])
		nodes, _ := strconv.Atoi(r[6])
		done, _ := strconv.ParseInt(r[8], 10, 64)
		agg, _ := strconv.ParseFloat(r[11], 64)
		sw, _ := strconv.ParseFloat(r[13], 64)
		if nodes != min(workers, 2) || done != int64(workers)*share[r[1]] || !(agg > 0) || !(sw > 0) {
			t.Errorf("step %v: want %d node(s), %d done, positive rates", r, min(workers, 2), int64(workers)*share[r[1]])
		}
	}

	// The rule file passes promtool and has the contract's records.
	rules := filepath.Join(out, "filesystem_plateaus.yml")
	if b, err := exec.Command("promtool", "check", "rules", rules).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, b)
	}
	rb, _ := os.ReadFile(rules)
	for _, w := range []string{
		`record: plateau:filesystem_plateau_bytes_per_second`, `labels: {target: "loop", op: "write"}`, `labels: {target: "loop", op: "read"}`,
		`record: plateau:filesystem_plateau_operations_per_second`, `labels: {target: "loop", op: "create"}`, `labels: {target: "loop", op: "remove"}`,
	} {
		if !bytes.Contains(rb, []byte(w)) {
			t.Errorf("rule file lacks %q:\n%s", w, rb)
		}
	}

	// The class baselines load with the repo's parser and apply to the
	// configured probes on any node.
	b, err := plateau.LoadBaselines(filepath.Join(out, "baselines.yml"))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := loadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range conf.Targets[0].Probes {
		for _, op := range probe.OpsOf(p.Kind) {
			e, why := b.For("loop", p, op)
			if e == nil {
				t.Errorf("class baseline %s %s: %s", p.Name, op, why)
				continue
			}
			if e.Host != "" || !(e.Value > 0) || e.Runs != 2 {
				t.Errorf("class baseline %s %s: host %q value %g runs %d, want no host, a value, 2 runs", p.Name, op, e.Host, e.Value, e.Runs)
			}
		}
	}
	// Nothing of the steps is left on the file system: only the lock.
	host, _ := os.Hostname()
	left, err := os.ReadDir(filepath.Join(target, host))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if e.Name() != ".lock" {
			t.Errorf("left in the probe directory: %s", e.Name())
		}
	}
}
