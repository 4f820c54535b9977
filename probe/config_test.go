package probe

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

func TestEmbeddedDefaultIsValidAndLight(t *testing.T) {
	cfg, err := LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Targets) != 1 {
		t.Fatalf("want one target, got %+v", cfg.Targets)
	}
	tg := cfg.Targets[0]
	if !strings.HasPrefix(tg.Path, os.TempDir()) || !tg.CreatePath {
		t.Errorf("default target should be a creatable dir in %s, got %q", os.TempDir(), tg.Path)
	}
	// A newcomer sees every kind, and its first result within a minute:
	// a probe's first slot comes within one interval of the start.
	kinds := map[string]bool{}
	var perHour float64
	for _, p := range tg.Probes {
		kinds[p.Kind] = true
		if p.Interval > time.Minute {
			t.Errorf("probe %s runs every %s: its first result could take longer than a minute", p.Name, p.Interval)
		}
		if p.Timeout >= p.Interval {
			t.Errorf("probe %s: timeout %s must be shorter than interval %s", p.Name, p.Timeout, p.Interval)
		}
		perHour += float64(BytesPerRun(p)) * float64(time.Hour) / float64(p.Interval)
	}
	for _, k := range KindNames() {
		if !kinds[k] {
			t.Errorf("the embedded default has no %s probe", k)
		}
	}
	// Under 1 GiB an hour in all by the planned bytes, and the random
	// probe's storage-dependent bytes are held to the same 1 GiB by the
	// target's budget.
	if perHour >= 1<<30 {
		t.Errorf("the embedded default plans %.0f MiB of I/O per hour, want under 1 GiB", perHour/(1<<20))
	}
	if tg.MaxBytesPerHour <= 0 || tg.MaxBytesPerHour > 1<<30 {
		t.Errorf("max_bytes_per_hour = %d, want at most 1GiB so the random probe's real I/O stays under it too", tg.MaxBytesPerHour)
	}
}

func TestDesignExampleParses(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
defaults:
  interval: 15m
  timeout: 2m
  splay: true
targets:
  - name: scratch
    path: /gpfs/scratch/.plateau
    min_free_ratio: 0.05
    max_bytes_per_hour: 8GiB
    warning_ratio: 0.7
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 256MiB, block_size: 8MiB}
      - {name: seq4, kind: sequential, workers: 4, file_size: 1G, block_size: 8M, interval: 1h, timeout: 5m, splay: false}
baselines_file: /var/lib/plateau_exporter/baselines.yml
`), "plateau.yml")
	if err != nil {
		t.Fatal(err)
	}
	tg := cfg.Targets[0]
	if tg.MaxBytesPerHour != 8<<30 || tg.MinFreeRatio != 0.05 || tg.WarningRatio != 0.7 || tg.CriticalRatio != DefaultCriticalRatio {
		t.Errorf("target = %+v", tg)
	}
	p := tg.Probes[1]
	if p.Workers != 4 || p.FileSize != 1<<30 || p.BlockSize != 8<<20 || p.Interval != time.Hour || p.Timeout != 5*time.Minute || p.Splay {
		t.Errorf("probe = %+v", p)
	}
	if tg.Probes[0].Interval != 15*time.Minute || tg.Probes[0].Timeout != 2*time.Minute || !tg.Probes[0].Splay {
		t.Errorf("defaults not applied: %+v", tg.Probes[0])
	}
	if cfg.BaselinesFile != "/var/lib/plateau_exporter/baselines.yml" {
		t.Errorf("baselines_file = %q", cfg.BaselinesFile)
	}
}

// configError is a bad config and the part of its error that names file,
// line and field.
type configError struct{ name, yaml, want string }

// checkConfigErrors holds that ParseConfig refuses each config with an
// error containing its want, one subtest a config.
func checkConfigErrors(t *testing.T, cases []configError) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml), "cfg.yml")
			if err == nil {
				t.Fatalf("config accepted:\n%s", tc.yaml)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, tc.want)
			}
		})
	}
}

// Every bad config must be rejected with an error naming file, line and field.
func TestBadConfigsNameLineAndField(t *testing.T) {
	const head = "targets:\n  - name: a\n    path: /tmp\n    probes:\n"
	checkConfigErrors(t, []configError{
		{"unknown top-level key", "bogus: 1\n" + head + "      - {name: s, kind: sequential}\n", "cfg.yml:1: bogus: unknown key"},
		{"unknown target key", "targets:\n  - name: a\n    path: /tmp\n    colour: red\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:4: targets[0].colour: unknown key"},
		{"unknown probe key", head + "      - name: s\n        kind: sequential\n        blocksize: 4MiB\n", "cfg.yml:7: targets[0].probes[0].blocksize: unknown key"},
		{"key of another kind", head + "      - name: s\n        kind: sequential\n        queue_depth: 16\n", "cfg.yml:7: targets[0].probes[0].queue_depth: does not apply to kind \"sequential\""},
		{"bad size", head + "      - name: s\n        kind: sequential\n        file_size: 12 parsecs\n", "cfg.yml:7: targets[0].probes[0].file_size: invalid size"},
		{"decimal unit", head + "      - name: s\n        kind: sequential\n        block_size: 8MB\n", "cfg.yml:7: targets[0].probes[0].block_size: invalid size unit \"MB\""},
		{"unaligned block", head + "      - name: s\n        kind: sequential\n        block_size: 1000\n        file_size: 1000\n", "cfg.yml:7: targets[0].probes[0].block_size: must be a positive multiple of 4KiB"},
		{"duplicate target", head + "      - {name: s, kind: sequential}\n  - name: a\n    path: /tmp\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:6: targets[1].name: duplicate target name \"a\" (first defined at line 2)"},
		{"duplicate probe", head + "      - {name: s, kind: sequential}\n      - {name: s, kind: sequential}\n", "cfg.yml:6: targets[0].probes[1].name: duplicate probe name \"s\""},
		{"missing path", "targets:\n  - name: a\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:2: targets[0].path: is required"},
		{"relative path", "targets:\n  - name: a\n    path: scratch\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:3: targets[0].path: must be an absolute path"},
		{"unknown kind", head + "      - {name: s, kind: iozone}\n", "cfg.yml:5: targets[0].probes[0].kind: unknown probe kind \"iozone\""},
		{"timeout not below interval", head + "      - {name: s, kind: sequential, interval: 10s, timeout: 10s}\n", "cfg.yml:5: targets[0].probes[0].timeout: must be positive and shorter than the interval"},
		{"bad duration", "defaults:\n  interval: often\n" + head + "      - {name: s, kind: sequential}\n", "cfg.yml:2: defaults.interval: invalid duration \"often\""},
		{"ratio out of range", "targets:\n  - name: a\n    path: /tmp\n    min_free_ratio: 5\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:4: targets[0].min_free_ratio: must be a number between 0 and 1"},
		{"unknown when_job_running", "targets:\n  - name: a\n    path: /tmp\n    when_job_running: pause\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:4: targets[0].when_job_running: must be skip or run, got \"pause\""},
		{"when_job_running as a list", "targets:\n  - name: a\n    path: /tmp\n    when_job_running: [skip]\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:4: targets[0].when_job_running: must be a single value"},
		{"duplicate key", "targets:\n  - name: a\n    name: b\n    path: /tmp\n    probes:\n      - {name: s, kind: sequential}\n", "cfg.yml:3: targets[0].name: duplicate key"},
		{"yaml syntax", "targets: [\n", "cfg.yml:1: did not find expected node content"},
		{"no targets", "defaults: {interval: 1m}\n", "cfg.yml:1: targets: at least one target is required"},
	})
}

// when_job_running defaults to skip: a probe beside a job slows the job
// and measures it rather than the storage.
func TestWhenJobRunning(t *testing.T) {
	cfg, err := ParseConfig([]byte("targets:\n  - name: a\n    path: /tmp\n    probes:\n      - {name: s, kind: sequential}\n  - name: b\n    path: /tmp\n    when_job_running: run\n    probes:\n      - {name: s, kind: sequential}\n  - name: c\n    path: /tmp\n    when_job_running: skip\n    probes:\n      - {name: s, kind: sequential}\n"), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a": WhenJobSkip, "b": WhenJobRun, "c": WhenJobSkip} {
		if got := cfg.Target(name).WhenJobRunning; got != want {
			t.Errorf("target %s: when_job_running %q, want %q", name, got, want)
		}
	}
}

func TestAllErrorsReportedAtOnce(t *testing.T) {
	_, err := ParseConfig([]byte("targets:\n  - name: a\n    path: /tmp\n    probes:\n      - {name: s, kind: sequential, file_size: x, block_size: y}\n"), "c.yml")
	if err == nil || !strings.Contains(err.Error(), "file_size") || !strings.Contains(err.Error(), "block_size") {
		t.Fatalf("want both bad fields reported, got %v", err)
	}
}

func TestLoadConfigFileChecksPaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plateau.yml")
	cfg := "targets:\n  - name: a\n    path: " + filepath.Join(dir, "missing") + "\n    probes:\n      - {name: s, kind: sequential}\n"
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfigFile(file)
	if err == nil || !strings.Contains(err.Error(), file+":2: targets[0].path: stat ") {
		t.Fatalf("want missing path error naming line 2, got %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "missing"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfigFile(file); err != nil {
		t.Fatalf("config with existing path rejected: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4K": 4096, "4KiB": 4096, "8M": 8 << 20, "8MiB": 8 << 20, "1.5GiB": 3 << 29, "2T": 2 << 40, "512 KiB": 512 << 10, "0": 0} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "8MB", "1.3B", "lots", "1e3", "9999999999T"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	for b, want := range map[int64]string{4096: "4KiB", 8 << 20: "8MiB", 3 << 29: "1536MiB", 1000: "1000B"} {
		if got := FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(EmbeddedDefaultYAML())
	f.Add([]byte("targets:\n  - name: a\n    path: /tmp\n    probes:\n      - {name: s, kind: sequential, workers: 2, file_size: 1GiB, block_size: 8MiB}\n"))
	f.Add([]byte("defaults: {interval: 1m, timeout: 10s, splay: false}\ntargets: []\n"))
	f.Add([]byte("targets:\n  - name: a\n    path: /mnt/a/ost{server}\n    servers: [\"0\", \"1\", x]\n    max_bytes_per_hour: 1GiB\n    fleet: {nodes: 100, max_bytes_per_hour: 40GiB}\n    probes:\n      - {name: s, kind: sequential, file_size: 16MiB, block_size: 1MiB}\n"))
	f.Add([]byte("targets:\n  - name: a\n    path: /tmp\n    fleet: {nodes: 5000, max_bytes_per_hour: 400GiB, filesystem_plateau: 40GiB/s}\n    probes:\n      - {name: s, kind: sequential, file_size: 16MiB, block_size: 1MiB}\n      - {name: m, kind: metadata, interval: 30m}\n"))
	f.Add([]byte("targets:\n  - name: ost0-disk\n    path: /srv/ost0\n    serves: scratch\n    probes:\n      - {name: s, kind: sequential, file_size: 16MiB, block_size: 1MiB}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data, "fuzz.yml")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		// An accepted config must satisfy the invariants the engine relies on.
		for _, tg := range cfg.Targets {
			if tg.Serves != "" && (tg.Serves == tg.Name || tg.ServerGroup != "") {
				t.Fatalf("accepted bad serves on %+v", tg)
			}
			for _, p := range tg.Probes {
				if p.Timeout <= 0 || p.Timeout >= p.Interval || p.Interval < time.Second || p.Interval < p.BaseInterval() || p.Interval > MaxStretchedInterval+p.BaseInterval() {
					t.Fatalf("accepted bad schedule %+v", p)
				}
				if p.Kind == KindSequential && (p.BlockSize <= 0 || p.FileSize%p.BlockSize != 0 || p.Workers <= 0) {
					t.Fatalf("accepted bad sequential probe %+v", p)
				}
			}
		}
	})
}

// A check of a path on a hung mount gives up at its deadline; a later check
// of the same path, while the first stat is still blocked, fails at once
// instead of blocking another thread, and checks again once it returns.
func TestPathCheckerDoesNotStackBlockedStats(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{Source: "cfg.yml", Targets: []*Target{{Name: "a", Path: dir, Line: 3}}}
	release := make(chan struct{})
	var calls atomic.Int32
	pc := &PathChecker{stat: func(p string) (os.FileInfo, error) {
		calls.Add(1)
		<-release
		return os.Stat(p)
	}}
	if err := pc.Check(cfg, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("first check of a hung path: %v", err)
	}
	start := time.Now()
	err := pc.Check(cfg, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "has not answered since an earlier check") {
		t.Fatalf("second check while the first stat is blocked: %v", err)
	}
	if time.Since(start) >= time.Minute || calls.Load() != 1 {
		t.Errorf("second check waited %s and made %d stats in all; want an immediate answer and one stat", time.Since(start), calls.Load())
	}
	if !strings.Contains(err.Error(), "cfg.yml:3: targets[0].path") {
		t.Errorf("error does not name the field: %v", err)
	}
	close(release)
	probetest.WaitUntil(t, "the path to check fine once the stat returns", 10*time.Second, func() bool {
		return pc.Check(cfg, 10*time.Second) == nil
	})
}
