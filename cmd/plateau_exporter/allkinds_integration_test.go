//go:build integration

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// Every probe kind on one target of a loop-mounted ext4, through the real
// daemon and its scheduler: a full cycle in which each op of each probe
// reports a rate above zero, and nothing but the kept files stays behind.
func TestIntegrationAllKindsFullCycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this integration test needs root (loop device, mount); run `make integration` as root")
	}
	mnt := probetest.MountLoop(t, "ext4", 1<<30).Mount
	probes := map[string]string{
		"seq":    "{name: seq, kind: sequential, workers: 2, file_size: 32MiB, block_size: 4MiB}",
		"cold":   "{name: cold, kind: sequential, workers: 1, file_size: 16MiB, block_size: 4MiB, read_after: 3s}",
		"shared": "{name: shared, kind: shared_file, workers: 2, segment_size: 16MiB, block_size: 1MiB}",
		"rand":   "{name: rand, kind: random, file_size: 64MiB, block_size: 4KiB, queue_depth: 16, duration: 1s}",
		"md":     "{name: md, kind: metadata, workers: 2, files: 256}",
		"md4k":   "{name: md4k, kind: metadata, workers: 2, files: 256, file_size: 4KiB}",
	}
	cfg := filepath.Join(t.TempDir(), "plateau.yml")
	text := "defaults:\n  interval: 8s\n  timeout: 7s\ntargets:\n  - name: loop\n    path: " + mnt + "\n    probes:\n"
	for _, p := range probes {
		text += "      - " + p + "\n"
	}
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{"seq": probe.KindSequential, "cold": probe.KindSequential, "shared": probe.KindSharedFile,
		"rand": probe.KindRandom, "md": probe.KindMetadata, "md4k": probe.KindMetadata}
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	missing := func() []string {
		m := d.metrics()
		bytes := series(m, "plateau_probe_throughput_bytes_per_second", "probe", "op")
		ops := series(m, "plateau_probe_operations_per_second", "probe", "op")
		var out []string
		for name, kind := range kinds {
			for _, op := range probe.OpsOf(kind) {
				key := name + "/" + op
				if ops[key] <= 0 || (kind != probe.KindMetadata && bytes[key] <= 0) {
					out = append(out, key)
				}
			}
		}
		return out
	}
	// The cold probe reads only from its second run on, once a generation
	// is read_after old.
	probetest.WaitUntil(t, "a rate above zero for every op of every probe", 4*time.Minute, func() bool { return len(missing()) == 0 })
	m := d.metrics()
	for name := range kinds {
		if v := value(m, fmt.Sprintf(`plateau_probe_errors_total{kind="%s",probe="%s",reason="other"`, kinds[name], name)); v != 0 {
			t.Errorf("%s: %v failures with reason other", name, v)
		}
	}
	// Only the lock file and the kept files (random's file, cold's
	// generations) live between runs; a run in progress has its run dir.
	entries, _ := os.ReadDir(filepath.Join(mnt, "n1"))
	for _, e := range entries {
		switch n := e.Name(); {
		case n == ".lock", n == "keep.rand", n == "keep.cold", len(n) > 4 && n[:4] == "run.":
		default:
			t.Errorf("unexpected entry in the probe directory: %s", n)
		}
	}
}
