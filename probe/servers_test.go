package probe

import (
	"strings"
	"testing"
	"time"
)

// A target with servers becomes one target per server: its name and path
// from the server's, its own probes, its server and group recorded.
func TestServersExpandIntoOneTargetPerServer(t *testing.T) {
	cfg, err := ParseConfig([]byte(`targets:
  - name: home
    path: /tmp
    probes:
      - {name: m, kind: metadata}
  - name: scratch
    path: /mnt/scratch/.plateau/ost{server}
    servers: ["0", "1", "2", "3"]
    max_bytes_per_hour: 4GiB
    probes:
      - {name: s, kind: sequential, file_size: 16MiB, block_size: 1MiB}
`), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(cfg.TargetNames(), " "), "home scratch-0 scratch-1 scratch-2 scratch-3"; got != want {
		t.Fatalf("targets %q, want %q", got, want)
	}
	if h := cfg.Target("home"); h.Server != "" || h.ServerGroup != "" {
		t.Errorf("an ordinary target has server %q group %q", h.Server, h.ServerGroup)
	}
	seen := map[*ProbeConfig]bool{}
	for i, s := range []string{"0", "1", "2", "3"} {
		tg := cfg.Targets[1+i]
		if tg.Name != "scratch-"+s || tg.Path != "/mnt/scratch/.plateau/ost"+s || tg.Server != s || tg.ServerGroup != "scratch" {
			t.Errorf("target %d: %+v", i, tg)
		}
		if tg.MaxBytesPerHour != 1<<30 {
			t.Errorf("target %s: max_bytes_per_hour %d, want a quarter of 4GiB", tg.Name, tg.MaxBytesPerHour)
		}
		if len(tg.Probes) != 1 || seen[tg.Probes[0]] {
			t.Errorf("target %s shares its probes with another server's", tg.Name)
		}
		seen[tg.Probes[0]] = true
	}
}

// The fleet block covers all the servers' targets together: each node's
// share of each server's target is the budget over nodes × servers, so
// one target with four servers stretches as four times the probes would.
func TestServersShareOneFleetBudget(t *testing.T) {
	const probes = "    probes:\n      - {name: s, kind: sequential, file_size: 16MiB, block_size: 1MiB, interval: 15m, timeout: 2m}\n"
	cfg, err := ParseConfig([]byte("targets:\n  - name: one\n    path: /tmp\n    fleet: {nodes: 100, max_bytes_per_hour: 12800MiB}\n"+probes+
		"  - name: four\n    path: /tmp/{server}\n    servers: [a, b, c, d]\n    fleet: {nodes: 100, max_bytes_per_hour: 12800MiB}\n"+probes), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	// 32MiB a run (written, read) × 4 runs an hour = 128MiB per node and
	// target: the single target's share (128MiB) holds it, each server's
	// (32MiB) stretches it four times.
	if one := cfg.Target("one"); one.Stretch.Stretched() || one.Probes[0].Interval != 15*time.Minute {
		t.Errorf("ordinary target stretched: %+v", one.Stretch)
	}
	for _, s := range []string{"a", "b", "c", "d"} {
		tg := cfg.Target("four-" + s)
		if tg.Fleet.Servers != 4 || tg.Fleet.MaxBytesPerHour != 12800<<20 {
			t.Errorf("%s: fleet %+v, want the whole budget over 4 servers", tg.Name, tg.Fleet)
		}
		if tg.Stretch.Share != 32<<20 || tg.Probes[0].Interval != time.Hour || tg.Probes[0].BaseInterval() != 15*time.Minute {
			t.Errorf("%s: share %s, interval %s (configured %s); want 32MiB and 1h from 15m", tg.Name, FormatBytes(tg.Stretch.Share), tg.Probes[0].Interval, tg.Probes[0].BaseInterval())
		}
	}
}

// Every bad servers list or path names file, line and field.
func TestBadServersNameLineAndField(t *testing.T) {
	const probes = "    probes:\n      - {name: s, kind: sequential}\n"
	checkConfigErrors(t, []configError{
		{"empty list", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers: []\n" + probes, "cfg.yml:4: targets[0].servers: must list at least one server"},
		{"not a list", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers: ost0\n" + probes, "cfg.yml:4: targets[0].servers: must be a list of server names, got"},
		{"empty name", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers:\n      - \"0\"\n      - \"\"\n" + probes, "cfg.yml:6: targets[0].servers[1]: must not be empty"},
		{"duplicate", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers:\n      - ost0\n      - ost0\n" + probes, "cfg.yml:6: targets[0].servers[1]: duplicate server \"ost0\" (first listed at line 5)"},
		{"a mapping for a name", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers:\n      - {id: 0}\n" + probes, "cfg.yml:5: targets[0].servers[0]: must be a single value"},
		{"slash", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers: [a/b]\n" + probes, "cfg.yml:4: targets[0].servers[0]: \"a/b\": a server name becomes part of a directory name"},
		{"bad target name", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers: [\"ost 0\"]\n" + probes, "cfg.yml:4: targets[0].servers[0]: server \"ost 0\" makes the target name \"a-ost 0\": use letters"},
		{"clash with a target", "targets:\n  - name: a-0\n    path: /tmp\n" + probes + "  - name: a\n    path: /tmp/{server}\n    servers: [\"0\"]\n" + probes, "cfg.yml:8: targets[1].servers[0]: server \"0\" makes the target name \"a-0\", already defined at line 2"},
		{"target after it clashes", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers: [\"0\"]\n" + probes + "  - name: a-0\n    path: /tmp\n" + probes, "cfg.yml:7: targets[1].name: duplicate target name \"a-0\" (first defined at line 4)"},
		{"second server makes a bad name", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers:\n      - ok\n      - \"x y\"\n" + probes, "cfg.yml:6: targets[0].servers[1]: server \"x y\" makes the target name \"a-x y\""},
		{"no placeholder", "targets:\n  - name: a\n    path: /tmp/ost\n    servers: [\"0\"]\n" + probes, "cfg.yml:3: targets[0].path: must contain {server}"},
		{"placeholder without servers", "targets:\n  - name: a\n    path: /tmp/ost{server}\n" + probes, "cfg.yml:3: targets[0].path: contains {server} but the target has no servers list"},
		{"fleet budget too small for the servers", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers: [\"0\", \"1\"]\n    fleet: {nodes: 5000, max_bytes_per_hour: 1MiB}\n" + probes, "cfg.yml:5: targets[0].fleet.max_bytes_per_hour: the share"},
	})
}
