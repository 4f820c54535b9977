package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/schedule"
)

// fleetProbes: seq moves 2 × 16MiB a run, shared 2 × 2 × 8MiB, md
// nothing; at 15m, 30m and 15m a node plans 192MiB an hour. 5000 nodes
// sharing 400GiB an hour get 81.92MiB each: a factor 2.34375, so the
// common 15m becomes 2110s (2109.375 rounded up) and 30m 4220s.
const fleetProbes = `    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 16MiB, block_size: 1MiB}
      - {name: shared, kind: shared_file, workers: 2, block_size: 1MiB, segment_size: 8MiB, interval: 30m}
      - {name: md, kind: metadata, workers: 1, files: 64}
`

// fleetConfig writes a config with one target "scratch" holding the fleet
// block and fleetProbes, and returns the file and the parsed config.
func fleetConfig(t *testing.T, defaults, fleet string) (string, *probe.Config) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "scratch")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("defaults:\n  interval: 15m\n  timeout: 1m\n%stargets:\n  - name: scratch\n    path: %s\n%s%s", defaults, path, fleet, fleetProbes)
	file := filepath.Join(dir, "plateau.yml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := probe.ParseConfig([]byte(text), file)
	if err != nil {
		t.Fatal(err)
	}
	return file, cfg
}

// printedRate finds "<name> probe load: N B/s" in check-config's output.
func printedRate(t *testing.T, out, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(name + ` probe load: ([0-9]+) B/s`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s probe load in:\n%s", name, out)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// bruteForcePeak counts, second by second, the bytes of every run each
// host starts over the intervals' hyper-period (in whole bins), with the
// scheduler's own hash for the slots, and returns the most bytes/s of any
// bin aligned to unix time. It shares no code with the simulation of
// check-config beyond SlotOffset.
func bruteForcePeak(t *testing.T, tg *probe.Target, hosts []string, bin int64) float64 {
	t.Helper()
	hyper := int64(1)
	for _, p := range tg.Probes {
		iv := int64(p.Interval / time.Second)
		if time.Duration(iv)*time.Second != p.Interval {
			t.Fatalf("interval %s is not whole seconds", p.Interval)
		}
		g := hyper
		for b := iv; b != 0; g, b = b, g%b {
		}
		hyper = hyper / g * iv
	}
	span := (hyper + bin - 1) / bin * bin
	perSecond := make([]float64, span)
	for _, p := range tg.Probes {
		iv := int64(p.Interval / time.Second)
		for _, h := range hosts {
			var off int64
			if p.Splay {
				off = int64(schedule.SlotOffset(h, tg.Name, p.Name, p.Interval) / time.Second)
			}
			for s := off; s < span; s += iv {
				perSecond[s] += float64(probe.BytesPerRun(p))
			}
		}
	}
	var peak float64
	for start := int64(0); start < span; start += bin {
		var sum float64
		for s := start; s < start+bin; s++ {
			sum += perSecond[s]
		}
		peak = math.Max(peak, sum/float64(bin))
	}
	return peak
}

// arithmeticMean is nodes × bytes per run / interval, summed over probes.
func arithmeticMean(tg *probe.Target, nodes int) float64 {
	var mean float64
	for _, p := range tg.Probes {
		mean += float64(nodes) * float64(probe.BytesPerRun(p)) / p.Interval.Seconds()
	}
	return mean
}

// The acceptance test of the fleet budget: check-config --fleet-nodes
// 5000 prints the stretch, the mean (checked against the arithmetic), the
// peak (against a brute-force simulation of every host's slots), the herd
// factor and the fractions of the file system's plateau.
func TestCheckConfigFleetLoad(t *testing.T) {
	file, cfg := fleetConfig(t, "", "    fleet: {nodes: 5000, max_bytes_per_hour: 400GiB, filesystem_plateau: 40GiB/s}\n")
	tg := cfg.Targets[0]
	if tg.Probes[0].Interval != 2110*time.Second || tg.Probes[1].Interval != 4220*time.Second {
		t.Fatalf("stretched intervals %s, %s; want 2110s and 4220s", tg.Probes[0].Interval, tg.Probes[1].Interval)
	}
	out := checkConfigOK(t, "--config.file", file, "--probe.hostname", "node0001", "check-config", "--fleet-nodes", "5000")
	outputHas(t, out,
		"scratch  seq     sequential   35m10s (configured 15m0s)",
		"fleet of target scratch: 5000 nodes (node0001 … node5000, simulated names)\n",
		"fleet budget 400GiB per hour: a node's share is 81.9MiB per hour",
		"per node: 192MiB of I/O per hour at the configured intervals, 81.9MiB after stretching them x2.344 (seq 15m0s→35m10s, shared 30m0s→1h10m20s, md 15m0s→35m10s)",
	)
	mean, peak := printedRate(t, out, "mean"), printedRate(t, out, "peak")
	if want := arithmeticMean(tg, 5000); math.Abs(mean-want) > 0.5 {
		t.Errorf("printed mean %v B/s, want nodes x bytes per run / interval = %v", mean, want)
	}
	if want := bruteForcePeak(t, tg, schedule.SimulatedHosts(5000), 60); math.Abs(peak-want) > 0.5 {
		t.Errorf("printed peak %v B/s, want the brute-force simulation's %v", peak, want)
	}
	if !strings.Contains(out, "of the intervals' whole hyper-period 1h10m20s") {
		t.Errorf("the simulation should cover the hyper-period 1h10m20s:\n%s", out)
	}
	herd := fmt.Sprintf("herd factor (peak/mean): %.2f (1.0 = perfectly spread)", peak/mean)
	plateau := fmt.Sprintf("file system plateau 40GiB/s: mean %.3g%% of it, peak %.3g%%", 100*mean/(40<<30), 100*peak/(40<<30))
	outputHas(t, out, herd, plateau)
	if peak < mean || peak > 1.5*mean {
		t.Errorf("a spread fleet of 5000 peaks at %v B/s over a mean of %v", peak, mean)
	}
}

// With splay off every node starts each probe in the same instant: the
// first bin holds the whole fleet's runs, nodes × bytes per run / bin, and
// the report shows that herd.
func TestCheckConfigFleetLoadWithoutSplay(t *testing.T) {
	file, cfg := fleetConfig(t, "  splay: false\n", "    fleet: {nodes: 5000, max_bytes_per_hour: 400GiB}\n")
	tg := cfg.Targets[0]
	out := checkConfigOK(t, "--config.file", file, "check-config")
	// seq, shared and md all start at unix time 0 mod their interval.
	var perRun float64
	for _, p := range tg.Probes {
		perRun += float64(probe.BytesPerRun(p))
	}
	peak, mean := printedRate(t, out, "peak"), printedRate(t, out, "mean")
	if want := 5000 * perRun / 60; math.Abs(peak-want) > 0.5 {
		t.Errorf("peak %v B/s, want nodes x bytes per run / bin = %v", peak, want)
	}
	if want := bruteForcePeak(t, tg, schedule.SimulatedHosts(5000), 60); math.Abs(peak-want) > 0.5 {
		t.Errorf("peak %v B/s, brute force says %v", peak, want)
	}
	if peak < 20*mean {
		t.Errorf("no herd shown: peak %v, mean %v", peak, mean)
	}
	outputHas(t, out, "0s into a simulation", "(splay off: every node starts the same probe at the same instant)", "file system plateau: unknown")
}

// --hosts places the slots of the named hosts and sets the fleet size; a
// target without a fleet block then gets a report at its configured
// intervals.
func TestCheckConfigFleetHostsFile(t *testing.T) {
	file, cfg := fleetConfig(t, "", "")
	var sb strings.Builder
	hosts := make([]string, 300)
	sb.WriteString("# compute nodes\n")
	for i := range hosts {
		hosts[i] = fmt.Sprintf("cn%03d.cluster", i+1)
		sb.WriteString(hosts[i] + "\n")
	}
	hostsFile := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostsFile, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out := checkConfigOK(t, "--config.file", file, "check-config", "--hosts", hostsFile, "--fleet-bin", "30s")
	tg := cfg.Targets[0]
	outputHas(t, out,
		"fleet of target scratch: 300 nodes (cn001.cluster … cn300.cluster, from --hosts)",
		"per node: 192MiB of I/O per hour; no fleet budget (fleet.max_bytes_per_hour): intervals as configured",
		"in the busiest 30s,",
	)
	if got, want := printedRate(t, out, "peak"), bruteForcePeak(t, tg, hosts, 30); math.Abs(got-want) > 0.5 {
		t.Errorf("peak %v B/s, brute force over the file's hosts says %v", got, want)
	}
	if got, want := printedRate(t, out, "mean"), arithmeticMean(tg, 300); math.Abs(got-want) > 0.5 {
		t.Errorf("mean %v B/s, want %v", got, want)
	}

	// A size that contradicts the file, a bad file, a bin under a second.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hosts", hostsFile, "--fleet-nodes", "5000"}, "--fleet-nodes 5000 but --hosts " + hostsFile + " lists 300 hosts"},
		{[]string{"--hosts", hostsFile + ".bad"}, hostsFile + ".bad:2: host \"cn001\" is listed twice (first at line 1)"},
		{[]string{"--fleet-nodes", "10", "--fleet-bin", "10ms"}, "--fleet-bin 10ms: must be at least 1s"},
	} {
		if err := os.WriteFile(hostsFile+".bad", []byte("cn001\ncn001\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runBinary(t, append([]string{"--config.file", file, "check-config"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q:\n%s", tc.args, code, tc.want, stderr)
		}
	}
}

// A bad fleet block fails check-config, naming file, line and field.
func TestCheckConfigFleetErrorNamesLineAndField(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plateau.yml")
	text := "targets:\n  - name: scratch\n    path: " + dir + "\n    fleet:\n      nodes: 5000\n      budget: 400GiB\n" + fleetProbes
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runBinary(t, "--config.file", file, "check-config")
	if want := file + ":6: targets[0].fleet.budget: unknown key"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, want 2 with %q:\n%s", code, want, stderr)
	}
}

// The daemon runs, exports and logs the stretched intervals, derived from
// the config alone at load.
func TestDaemonRunsStretchedIntervals(t *testing.T) {
	file, _ := fleetConfig(t, "", "    fleet: {nodes: 5000, max_bytes_per_hour: 400GiB}\n")
	d := startDaemon(t, "--config.file", file, "--probe.hostname", "node0001")
	m := d.metrics()
	for probeName, want := range map[string]float64{"seq": 2110, "shared": 4220, "md": 2110} {
		prefix := `plateau_probe_interval_seconds{kind="` + map[string]string{"seq": "sequential", "shared": "shared_file", "md": "metadata"}[probeName] + `",probe="` + probeName + `"`
		if got := value(m, prefix); got != want {
			t.Errorf("%s: plateau_probe_interval_seconds = %v, want the stretched %v", probeName, got, want)
		}
	}
	probetest.WaitUntil(t, "the stretch in the log", 10*time.Second, func() bool {
		log := d.stderr.String()
		return strings.Contains(log, `msg="fleet budget stretches the target's probe intervals" target=scratch fleet_nodes=5000`) &&
			strings.Contains(log, `factor=2.344 probes="seq 15m0s→35m10s, shared 30m0s→1h10m20s, md 15m0s→35m10s"`) &&
			strings.Contains(log, `probe=seq kind=sequential interval=35m10s`) && strings.Contains(log, "configured_interval=15m0s")
	})
}
