package schedule

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

func TestSimulatedHosts(t *testing.T) {
	if h := SimulatedHosts(3); strings.Join(h, " ") != "node0001 node0002 node0003" {
		t.Errorf("SimulatedHosts(3) = %v", h)
	}
	h := SimulatedHosts(12345)
	if len(h) != 12345 || h[0] != "node00001" || h[12344] != "node12345" {
		t.Errorf("SimulatedHosts(12345) runs %s … %s", h[0], h[len(h)-1])
	}
}

func TestParseHosts(t *testing.T) {
	data, err := os.ReadFile("testdata/hosts.txt")
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := ParseHosts(data, "hosts.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(hosts, " "); got != "node0001 node0002 node0003 gpu-a100-17.cluster.example.org login1" {
		t.Errorf("hosts = %s", got)
	}
	for in, want := range map[string]string{
		"a\nb c\n":          "hosts.txt:2: \"b c\": want one host name per line",
		"a\n\nb\na # again": "hosts.txt:4: host \"a\" is listed twice (first at line 1)",
		"# none\n\n":        "hosts.txt: no host names",
		"a\tb\n":            "hosts.txt:1: \"a\\tb\": want one host name per line",
	} {
		if _, err := ParseHosts([]byte(in), "hosts.txt"); err == nil || err.Error() != want {
			t.Errorf("ParseHosts(%q): %v, want %q", in, err, want)
		}
	}
}

func FuzzParseHosts(f *testing.F) {
	data, err := os.ReadFile("testdata/hosts.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("a\na\n"))
	f.Add([]byte("x y\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		hosts, err := ParseHosts(data, "fuzz.txt")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.txt") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, h := range hosts {
			if h == "" || seen[h] || strings.ContainsAny(h, "# \t\r\n") {
				t.Fatalf("accepted bad or duplicate host %q in %q", h, hosts)
			}
			seen[h] = true
		}
		// The names written back one a line read the same.
		again, err := ParseHosts([]byte(strings.Join(hosts, "\n")), "fuzz.txt")
		if err != nil || strings.Join(again, "\n") != strings.Join(hosts, "\n") {
			t.Fatalf("round trip of %q: %q, %v", hosts, again, err)
		}
	})
}

func fleetTarget(splay bool, intervals ...time.Duration) *probe.Target {
	t := &probe.Target{Name: "scratch"}
	for i, iv := range intervals {
		t.Probes = append(t.Probes, &probe.ProbeConfig{Name: string(rune('a' + i)), Kind: probe.KindSequential,
			Workers: 1, FileSize: 8 << 20, BlockSize: 1 << 20, Interval: iv, Splay: splay})
	}
	return t
}

// With splay off every node starts in the same bin: the peak is all the
// fleet's bytes in one bin, the herd factor the bins per interval.
func TestFleetLoadWithoutSplayIsOneHerd(t *testing.T) {
	l, err := FleetLoadOf(FleetLoadParams{Target: fleetTarget(false, 15*time.Minute), Hosts: SimulatedHosts(5000)})
	if err != nil {
		t.Fatal(err)
	}
	const perRun = 16 << 20
	if want := 5000.0 * perRun / 60; l.Peak != want {
		t.Errorf("peak %v, want %v", l.Peak, want)
	}
	if want := 5000.0 * perRun / 900; l.Mean != want {
		t.Errorf("mean %v, want %v", l.Mean, want)
	}
	if h := l.Herd(); h < 14.999 || h > 15.001 || !l.Complete || l.Window != 15*time.Minute || !l.PeakAt.Equal(time.Unix(0, 0)) {
		t.Errorf("herd %v over %s (complete %v, peak at %s), want 15 over one 15m interval", h, l.Window, l.Complete, l.PeakAt)
	}
	// Spread, the same fleet's busiest minute holds barely more than its
	// fifteenth.
	l, err = FleetLoadOf(FleetLoadParams{Target: fleetTarget(true, 15*time.Minute), Hosts: SimulatedHosts(5000)})
	if err != nil || l.Herd() < 1 || l.Herd() > 1.2 {
		t.Errorf("spread fleet: herd %v, %v", l.Herd(), err)
	}
}

// The window is the intervals' hyper-period in whole bins, cut by the
// bounds of the simulation.
func TestFleetLoadWindow(t *testing.T) {
	l, _ := FleetLoadOf(FleetLoadParams{Target: fleetTarget(true, 15*time.Minute, 20*time.Minute), Hosts: SimulatedHosts(10)})
	if l.HyperPeriod != time.Hour || l.Window != time.Hour || !l.Complete {
		t.Errorf("15m and 20m: hyper-period %s window %s complete %v, want 1h", l.HyperPeriod, l.Window, l.Complete)
	}
	l, _ = FleetLoadOf(FleetLoadParams{Target: fleetTarget(true, 3331*time.Second, 6661*time.Second), Hosts: SimulatedHosts(10)})
	if l.HyperPeriod != 0 || l.Window != DefaultFleetWindow || l.Complete {
		t.Errorf("odd seconds: hyper-period %s window %s complete %v, want 8 days of a longer one", l.HyperPeriod, l.Window, l.Complete)
	}
	l, _ = FleetLoadOf(FleetLoadParams{Target: fleetTarget(true, time.Second), Hosts: SimulatedHosts(1000), MaxRuns: 60_000})
	if l.Window != time.Minute {
		t.Errorf("60000 runs of 1000 nodes every second: window %s, want 1m", l.Window)
	}
	if _, err := FleetLoadOf(FleetLoadParams{Target: fleetTarget(true, time.Minute)}); err == nil {
		t.Error("a fleet without hosts simulated")
	}
}
