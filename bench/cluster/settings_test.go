package cluster

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// The probes of every exporter: small, so that four clients on a shared
// two-core machine stay light, and so that the space MooseFS holds for
// removed probe files (see space) lasts.
const (
	seqFileSize  = 4 << 20
	seqBlockSize = 1 << 20
	mdFiles      = 64
	// minFreeRatio stops the data probe, not the metadata probe, once
	// the cluster is nearly full, as a site would configure it.
	minFreeRatio = 0.05
)

// settings is what the environment asks for.
type settings struct {
	opts     mfscluster.Options
	interval time.Duration
	// hold is how long the cluster stays up; 0 waits for a signal.
	hold     time.Duration
	exporter string
}

// settingsFromEnv reads the settings from getenv; every error names the
// variable and what it wants.
func settingsFromEnv(getenv func(string) string) (settings, error) {
	s := settings{
		opts:     mfscluster.Options{ChunkServers: 3, Clients: 4, DiskSize: 1 << 30},
		interval: 30 * time.Second,
		exporter: "../../plateau_exporter",
	}
	for _, v := range []struct {
		name string
		to   *int
	}{{"CHUNKSERVERS", &s.opts.ChunkServers}, {"CLIENTS", &s.opts.Clients}} {
		if env := getenv(v.name); env != "" {
			n, err := strconv.Atoi(env)
			if err != nil || n < 1 {
				return s, fmt.Errorf("%s=%q: want a whole number of at least 1", v.name, env)
			}
			*v.to = n
		}
	}
	if env := getenv("DISK_SIZE"); env != "" {
		n, err := probe.ParseSize(env)
		if err != nil {
			return s, fmt.Errorf("DISK_SIZE: %w", err)
		}
		s.opts.DiskSize = n
	}
	for _, v := range []struct {
		name string
		to   *time.Duration
		min  time.Duration
	}{{"INTERVAL", &s.interval, 2 * time.Second}, {"HOLD", &s.hold, time.Second}} {
		if env := getenv(v.name); env != "" {
			d, err := time.ParseDuration(env)
			if err != nil || d < v.min {
				return s, fmt.Errorf("%s=%q: want a Go duration (90s, 10m) of at least %s", v.name, env, v.min)
			}
			*v.to = d
		}
	}
	if env := getenv("PLATEAU_EXPORTER"); env != "" {
		s.exporter = env
	}
	exporter, err := filepath.Abs(s.exporter)
	if err != nil {
		return s, fmt.Errorf("plateau_exporter at %s: %w", s.exporter, err)
	}
	s.exporter = exporter
	return s, nil
}

// timeout is the probes' timeout: half the interval, in whole seconds.
func (s settings) timeout() time.Duration {
	return max((s.interval / 2).Truncate(time.Second), time.Second)
}

// exporterConfig is the config of the exporter on a client: one target,
// <mount>/plateau, in which the daemon works in <hostname>/; a
// sequential and a metadata probe.
func exporterConfig(set settings, mount, baselines string) string {
	return fmt.Sprintf(`defaults:
  interval: %s
  timeout: %s
  splay: true
targets:
  - name: mfs
    path: %s
    min_free_ratio: %g
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: %s, block_size: %s}
      - {name: md, kind: metadata, workers: 1, files: %d, file_size: 0}
baselines_file: %s
`, set.interval, set.timeout(), filepath.Join(mount, "plateau"), minFreeRatio, probe.FormatSize(seqFileSize), probe.FormatSize(seqBlockSize), mdFiles, baselines)
}

func TestSettingsFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	s, err := settingsFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (mfscluster.Options{ChunkServers: 3, Clients: 4, DiskSize: 1 << 30}); s.opts != want || s.interval != 30*time.Second || s.hold != 0 || s.timeout() != 15*time.Second {
		t.Errorf("defaults: %+v, interval %s, hold %s, timeout %s", s.opts, s.interval, s.hold, s.timeout())
	}
	if !filepath.IsAbs(s.exporter) || filepath.Base(s.exporter) != "plateau_exporter" {
		t.Errorf("default exporter %q, want an absolute path to plateau_exporter", s.exporter)
	}
	s, err = settingsFromEnv(env(map[string]string{"CHUNKSERVERS": "2", "CLIENTS": "6", "DISK_SIZE": "2GiB", "INTERVAL": "5s", "HOLD": "90s"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := (mfscluster.Options{ChunkServers: 2, Clients: 6, DiskSize: 2 << 30}); s.opts != want || s.interval != 5*time.Second || s.hold != 90*time.Second || s.timeout() != 2*time.Second {
		t.Errorf("overridden: %+v, interval %s, hold %s, timeout %s", s.opts, s.interval, s.hold, s.timeout())
	}
	for _, bad := range []map[string]string{
		{"CLIENTS": "four"}, {"CHUNKSERVERS": "0"}, {"DISK_SIZE": "1GB"}, {"INTERVAL": "1s"}, {"HOLD": "10"},
	} {
		if _, err := settingsFromEnv(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		} else {
			for k := range bad {
				if !strings.Contains(err.Error(), k) {
					t.Errorf("%v: error %q does not name %s", bad, err, k)
				}
			}
		}
	}
}

// The exporters' config is one the daemon accepts, at the default
// interval and the shortest one allowed.
func TestExporterConfigParses(t *testing.T) {
	for _, interval := range []time.Duration{30 * time.Second, 2 * time.Second} {
		s := settings{interval: interval}
		cfg, err := probe.ParseConfig([]byte(exporterConfig(s, "/mnt/client-0", "/run/baselines.yml")), "client-0.yml")
		if err != nil {
			t.Fatalf("interval %s: %v", interval, err)
		}
		if len(cfg.Targets) != 1 || cfg.Targets[0].Path != "/mnt/client-0/plateau" || cfg.Targets[0].MinFreeRatio != minFreeRatio || len(cfg.Targets[0].Probes) != 2 {
			t.Fatalf("interval %s: parsed %+v", interval, cfg.Targets[0])
		}
		for _, p := range cfg.Targets[0].Probes {
			if p.Interval != interval || p.Timeout != s.timeout() {
				t.Errorf("interval %s: probe %s runs every %s with timeout %s", interval, p.Name, p.Interval, p.Timeout)
			}
		}
	}
}
