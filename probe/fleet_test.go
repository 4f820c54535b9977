package probe

import (
	"strings"
	"testing"
	"time"
)

func TestStretchIntervals(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		intervals []time.Duration
		bytes     []int64
		share     float64
		factor    float64
		want      []time.Duration
	}{
		// 4 MiB every minute is 240 MiB an hour; a share of 60 MiB asks
		// for 4x: every 4 minutes.
		{"exact factor", []time.Duration{time.Minute}, []int64{4 * mib}, 60 * mib, 4, []time.Duration{4 * time.Minute}},
		{"within the share", []time.Duration{time.Minute}, []int64{4 * mib}, 240 * mib, 1, []time.Duration{time.Minute}},
		{"no budget", []time.Duration{time.Minute}, []int64{4 * mib}, 0, 1, []time.Duration{time.Minute}},
		// 15m and 30m at 3.7x: the common 15m becomes 3330s, and the
		// 30m probe stays at twice it.
		{"multiples stay multiples", []time.Duration{15 * time.Minute, 30 * time.Minute}, []int64{900 * mib, 1800 * mib}, 7200 * mib / 3.7, 3.7,
			[]time.Duration{3330 * time.Second, 6660 * time.Second}},
		// A factor that is not a whole number of seconds of the common
		// interval rounds up, never down: 60s × 1.00001 → 61s.
		{"rounds up", []time.Duration{time.Minute}, []int64{100 * mib}, 6000 * mib / 1.00001, 1.00001, []time.Duration{61 * time.Second}},
		// 61s and 60s have a 1s common divisor: 1s × 1.5 → 2s would be
		// 33% more than needed, so each rounds on its own.
		{"coprime intervals round alone", []time.Duration{61 * time.Second, 60 * time.Second}, []int64{61 * mib, 60 * mib}, 60 * 60 * 2 * mib / 1.5, 1.5,
			[]time.Duration{92 * time.Second, 90 * time.Second}},
		// A probe moving no data (metadata with empty files) still
		// stretches with the others, at the same factor.
		{"zero-byte probe stretches too", []time.Duration{time.Minute, time.Minute}, []int64{4 * mib, 0}, 120 * mib, 2, []time.Duration{2 * time.Minute, 2 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := StretchIntervals(tc.intervals, tc.bytes, tc.share)
			if err != nil {
				t.Fatal(err)
			}
			if d := s.Factor - tc.factor; d > 1e-9 || d < -1e-9 {
				t.Errorf("factor %v, want %v", s.Factor, tc.factor)
			}
			var planned float64
			for i, iv := range s.Intervals {
				if iv != tc.want[i] {
					t.Errorf("interval %d: %s, want %s", i, iv, tc.want[i])
				}
				if iv < tc.intervals[i] {
					t.Errorf("interval %d shrank: %s < %s", i, iv, tc.intervals[i])
				}
				if iv%time.Second != 0 && s.Stretched() {
					t.Errorf("interval %d is %s, not whole seconds", i, iv)
				}
				planned += float64(tc.bytes[i]) * float64(time.Hour) / float64(iv)
			}
			if tc.share > 0 && planned > tc.share*(1+1e-9) {
				t.Errorf("stretched probes plan %.0f bytes/h, over the share %.0f", planned, tc.share)
			}
		})
	}
	if _, err := StretchIntervals([]time.Duration{time.Minute}, []int64{1 << 30}, 1); err == nil || !strings.Contains(err.Error(), "beyond 168h0m0s: raise") {
		t.Errorf("a share of 1 byte per hour stretched without error: %v", err)
	}
}

func TestFleetConfigStretchesIntervals(t *testing.T) {
	// 2 × 16MiB a run every 15m: 128 MiB an hour. 5000 nodes sharing 200GiB
	// an hour get 40.96 MiB each: a factor 3.125, 15m → 46m52.5s → 46m53s.
	cfg, err := ParseConfig([]byte(`
defaults: {interval: 15m, timeout: 2m}
targets:
  - name: scratch
    path: /gpfs/scratch/.plateau
    max_bytes_per_hour: 1GiB
    fleet: {nodes: 5000, max_bytes_per_hour: 200GiB, filesystem_plateau: 40GiB/s}
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 16MiB, block_size: 1MiB}
      - {name: md, kind: metadata, workers: 1, files: 16, interval: 30m}
  - name: other
    path: /other
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 16MiB, block_size: 1MiB}
`), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	tg := cfg.Targets[0]
	if tg.Fleet == nil || tg.Fleet.Nodes != 5000 || tg.Fleet.MaxBytesPerHour != 200<<30 || tg.Fleet.FilesystemPlateau != 40<<30 {
		t.Fatalf("fleet = %+v", tg.Fleet)
	}
	seq, md := tg.Probes[0], tg.Probes[1]
	if seq.Interval != 46*time.Minute+53*time.Second || seq.ConfiguredInterval != 15*time.Minute {
		t.Errorf("seq interval %s (configured %s), want 46m53s from 15m", seq.Interval, seq.ConfiguredInterval)
	}
	// md's 30m is twice seq's 15m and stays so.
	if md.Interval != 2*seq.Interval || md.Timeout != 2*time.Minute {
		t.Errorf("md interval %s timeout %s, want twice seq's and the timeout unchanged", md.Interval, md.Timeout)
	}
	if f := tg.Stretch.Factor; f < 3.1249 || f > 3.1251 {
		t.Errorf("factor %v, want 3.125", f)
	}
	if o := cfg.Targets[1]; o.Fleet != nil || o.Probes[0].Interval != 15*time.Minute || o.Stretch.Stretched() {
		t.Errorf("a target without fleet block changed: %+v", o.Probes[0])
	}
	// check-config's what-if: 10000 nodes halve the share again.
	s, err := tg.ApplyFleet(10000)
	if err != nil || seq.Interval != 5625*time.Second || seq.BaseInterval() != 15*time.Minute || s.Factor < 6.2499 || s.Factor > 6.2501 {
		t.Errorf("10000 nodes: %s from %s, factor %v, %v", seq.Interval, seq.BaseInterval(), s.Factor, err)
	}
}

func TestBadFleetConfigsNameLineAndField(t *testing.T) {
	const head = "targets:\n  - name: a\n    path: /tmp\n"
	const probes = "    probes:\n      - {name: s, kind: sequential, file_size: 16MiB, block_size: 1MiB}\n"
	checkConfigErrors(t, []configError{
		{"unknown key", head + "    fleet:\n      nodes: 10\n      max_bytes_per_hours: 1GiB\n" + probes, "cfg.yml:6: targets[0].fleet.max_bytes_per_hours: unknown key"},
		{"no nodes", head + "    fleet:\n      max_bytes_per_hour: 1GiB\n" + probes, "cfg.yml:5: targets[0].fleet.nodes: is required"},
		{"zero nodes", head + "    fleet: {nodes: 0, max_bytes_per_hour: 1GiB}\n" + probes, "cfg.yml:4: targets[0].fleet.nodes: must be at least 1"},
		{"bad nodes", head + "    fleet: {nodes: many}\n" + probes, "cfg.yml:4: targets[0].fleet.nodes: invalid integer \"many\""},
		{"zero budget", head + "    fleet:\n      nodes: 10\n      max_bytes_per_hour: 0\n" + probes, "cfg.yml:6: targets[0].fleet.max_bytes_per_hour: must be positive"},
		{"decimal budget", head + "    fleet: {nodes: 10, max_bytes_per_hour: 400GB}\n" + probes, "cfg.yml:4: targets[0].fleet.max_bytes_per_hour: invalid size unit \"GB\""},
		{"bad plateau", head + "    fleet:\n      nodes: 10\n      filesystem_plateau: fast\n" + probes, "cfg.yml:6: targets[0].fleet.filesystem_plateau: invalid rate \"fast\""},
		{"negative plateau", head + "    fleet:\n      nodes: 10\n      filesystem_plateau: -5\n" + probes, "cfg.yml:6: targets[0].fleet.filesystem_plateau: rate \"-5\" must be a positive"},
		{"not a mapping", head + "    fleet: 5000\n" + probes, "cfg.yml:4: targets[0].fleet: must be a mapping"},
		{"budget too small", head + "    fleet:\n      nodes: 5000\n      max_bytes_per_hour: 1MiB\n" + probes, "cfg.yml:6: targets[0].fleet.max_bytes_per_hour: the share 210B per hour would stretch"},
	})
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"40GiB/s": 40 << 30, "512MiB": 512 << 20, "4096": 4096, "4.2e+10": 4.2e10, " 1.5G/s ": 1.5 * (1 << 30)} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "40GB/s", "fast", "NaN", "+Inf", "0GiB/s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for b, want := range map[float64]string{40 << 30: "40GiB", 8320 << 20: "8.1GiB", 400 << 30 / 5000.0: "81.9MiB", 512: "512B", 209.7: "210B", 1536: "1.5KiB"} {
		if got := FormatBytes(b); got != want {
			t.Errorf("FormatBytes(%v) = %q, want %q", b, got, want)
		}
	}
}
