package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lnetFixture reads one fixture of fixtures/lnet.
func lnetFixture(t testing.TB, version, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(fixturePath(t, "lnet", version, file))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestParseLnetctlShowFixtures: every fixture, real capture or written from
// the print code, in cYAML's layout (2.12 to 2.15) or libyaml's (2.16),
// reads with no bad line, and the fields checked by hand against the raw
// text come out.
func TestParseLnetctlShowFixtures(t *testing.T) {
	type ni struct {
		net, nid, status string
		health           int
	}
	for _, tc := range []struct {
		version string
		nis     []ni
		// peers is the number of peer NIs and peer one of them.
		peers int
		peer  lnetIface
	}{
		{version: "2.12", nis: []ni{{"lo", "0@lo", "up", 942}, {"tcp", "10.73.20.11@tcp", "up", 1000}},
			peers: 3, peer: lnetIface{nid: "10.73.20.21@tcp", state: "NA", health: 1000, hasHealth: true}},
		{version: "2.14", nis: []ni{{"lo", "0@lo", "up", 1000}, {"tcp", "172.16.0.24@tcp", "up", 1000}, {"tcp", "172.16.0.25@tcp", "up", 1000}}},
		{version: "2.15", nis: []ni{{"lo", "0@lo", "up", 1000}, {"tcp", "172.16.14.1@tcp", "up", 1000}, {"tcp", "172.16.14.2@tcp", "up", 0}},
			peers: 6, peer: lnetIface{nid: "172.16.15.254@tcp", state: "down", health: 0, hasHealth: true}},
		{version: "2.16", nis: []ni{{"lo", "0@lo", "up", 1000}, {"o2ib", "10.20.0.5@o2ib", "up", 1000}, {"o2ib", "10.20.1.5@o2ib", "down", 0}},
			peers: 6, peer: lnetIface{nid: "172.16.16.11@tcp1", state: "NA", health: 900, hasHealth: true}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			s := parseLnetctlShow(lnetFixture(t, tc.version, "net_show.yaml"))
			if s.bad.count != 0 || s.errMsg != "" {
				t.Errorf("net show: %d bad lines (%s), error %q", s.bad.count, s.bad.first, s.errMsg)
			}
			var got []ni
			for _, n := range s.nis {
				if !n.hasHealth {
					t.Errorf("NI %s: no health value", n.nid)
				}
				got = append(got, ni{n.net, n.nid, n.state, n.health})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.nis) {
				t.Errorf("NIs\n got %v\nwant %v", got, tc.nis)
			}
			if tc.peers == 0 {
				return
			}
			p := parseLnetctlShow(lnetFixture(t, tc.version, "peer_show.yaml"))
			if p.bad.count != 0 || len(p.nis) != 0 {
				t.Errorf("peer show: %d bad lines (%s), %d NIs", p.bad.count, p.bad.first, len(p.nis))
			}
			found := false
			n := 0
			for _, pe := range p.peers {
				if pe.nid == "0@lo" {
					continue // 2.12's ioctl path lists the loopback; netlink does not
				}
				n++
				if !pe.hasHealth {
					t.Errorf("peer NI %s: no health value", pe.nid)
				}
				found = found || pe == tc.peer
			}
			if n != tc.peers || !found {
				t.Errorf("%d peer NIs, want %d; %+v found: %v", n, tc.peers, tc.peer, found)
			}
		})
	}
}

// TestParseLnetctlShowBadLines: only what is really malformed counts.
func TestParseLnetctlShowBadLines(t *testing.T) {
	s := parseLnetctlShow([]byte("net:\n" +
		"    - net type: tcp\n" +
		"      local NI(s):\n" +
		"        - nid: 10.0.0.1@tcp\n" +
		"          status: up\n" +
		"          a key a newer lnetctl adds: 7\n" +
		"          CPT:\n" +
		"            - 0\n" +
		"          garbage without a colon\n" +
		"          health stats:\n" +
		"              health value: lots\n" +
		"\thealth value: 3\n"))
	if s.bad.count != 3 {
		t.Errorf("%d bad lines, want 3 (no colon, not a number, tab): first %s", s.bad.count, s.bad.first)
	}
	if len(s.nis) != 1 || s.nis[0].nid != "10.0.0.1@tcp" || s.nis[0].hasHealth {
		t.Errorf("NIs %+v, want 10.0.0.1@tcp without a health value", s.nis)
	}
	down := parseLnetctlShow([]byte("show:\n    - net:\n          errno: -100\n          descr: \"cannot get networks: Network is down\"\n"))
	if down.bad.count != 0 || down.errMsg != "cannot get networks: Network is down" {
		t.Errorf("error block: %d bad, message %q", down.bad.count, down.errMsg)
	}
}

// newTestLnet builds the collector on the fake lnetctl serving version's
// fixtures, with a module directory that exists.
func newTestLnet(t *testing.T, version string, cfg lnetConfig) *lnetCollector {
	t.Helper()
	t.Setenv("FAKE_LNET_FIXTURES", fixturePath(t, "lnet", version))
	if cfg.lnetctlPath == "" {
		cfg.lnetctlPath = fixturePath(t, "lnet", "lnetctl")
	}
	if cfg.moduleDir == "" {
		cfg.moduleDir = t.TempDir()
	}
	cfg.interval, cfg.timeout = time.Hour, 5*time.Second
	c, err := newLnetCollector(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLnetCollector: the series of a 2.15 node (real net show, the local NI
// at health 0 included; peers with a degraded, an unhealthy and a down
// router NI) and of a 2.16 one (libyaml's layout, an NI down), as in the
// expected files, checked by hand against the fixtures.
func TestLnetCollector(t *testing.T) {
	for _, version := range []string{"2.15", "2.16"} {
		t.Run(version, func(t *testing.T) {
			c := newTestLnet(t, version, lnetConfig{peers: true})
			reg := newTestRegistry("lnet", c, nil)
			file := fixturePath(t, "expected", "lnet-"+version+".prom")
			compareWithFile(t, reg, file, metricNames(t, file)...)
			n, err := testutil.GatherAndCount(reg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d series in all", version, n)
		})
	}
}

// TestLnetIdle: no module, no lnetctl, LNet not configured, or lnetctl
// refused for want of root: the collector is idle, not failing.
func TestLnetIdle(t *testing.T) {
	script := func(t *testing.T, body string) string {
		path := filepath.Join(t.TempDir(), "lnetctl")
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for name, cfg := range map[string]func(t *testing.T) lnetConfig{
		"no module":  func(t *testing.T) lnetConfig { return lnetConfig{moduleDir: filepath.Join(t.TempDir(), "lnet")} },
		"no lnetctl": func(t *testing.T) lnetConfig { return lnetConfig{lnetctlPath: filepath.Join(t.TempDir(), "lnetctl")} },
		// What 2.15's lnetctl prints with LNet loaded and not configured.
		"network down": func(t *testing.T) lnetConfig {
			return lnetConfig{lnetctlPath: script(t, `printf 'show:\n    - net:\n          errno: -100\n          descr: "cannot get networks: Network is down"\n' >&2; exit 1`)}
		},
		// 2.16's netlink answer to a caller without CAP_SYS_ADMIN.
		"not root": func(t *testing.T) lnetConfig {
			return lnetConfig{lnetctlPath: script(t, `printf 'show:\n-     net:\n      errno: -1\n      descr: ! "Operation not permitted"\n' >&2; exit 255`)}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newTestLnet(t, "2.15", cfg(t))
			reg := newTestRegistry("lnet", c, nil)
			ms, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range ms {
				if mf.GetName() == "plateau_scrape_collector_present" && mf.GetMetric()[0].GetGauge().GetValue() != 0 {
					t.Error("plateau_scrape_collector_present is not 0")
				}
			}
			if n, _ := testutil.GatherAndCount(reg, "plateau_scrape_collector_success"); n != 0 {
				t.Errorf("an idle collector has a success series")
			}
		})
	}
	// With sudo, a refusal is a misconfiguration: a failure, not idle.
	t.Run("sudo refused", func(t *testing.T) {
		c := newTestLnet(t, "2.15", lnetConfig{lnetctlPath: script(t, `echo "Permission denied" >&2; exit 1`)})
		c.cfg.sudo = true // the runner still runs it without sudo
		r := c.round()
		if r.absent != "" || r.err == nil {
			t.Errorf("round: absent %q, err %v; want a failure", r.absent, r.err)
		}
	})
}

// TestLnetBounded: a server with 20,000 peer NIs on two networks, a few of
// them unhealthy, still gives five series per network.
func TestLnetBounded(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("peer:\n")
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&b, "-     primary nid: 10.1.%d.%d@o2ib\n      Multi-Rail: True\n      peer ni:\n", i/250, i%250)
		for _, net := range []string{"o2ib", "o2ib1"} {
			health := 1000
			if i%1000 == 7 {
				health = 100 * (i % 10)
			}
			fmt.Fprintf(&b, "      -     nid: 10.1.%d.%d@%s\n            state: NA\n            health stats:\n                  health value: %d\n",
				i/250, i%250, net, health)
		}
	}
	s := parseLnetctlShow(b.Bytes())
	if s.bad.count != 0 || len(s.peers) != 20000 {
		t.Fatalf("%d bad lines, %d peer NIs", s.bad.count, len(s.peers))
	}
	c := newTestLnet(t, "2.15", lnetConfig{})
	ms := c.peerMetrics(s.peers)
	if len(ms) != 10 {
		t.Errorf("%d peer series for 20,000 peer NIs on 2 networks, want 10", len(ms))
	}
	t.Logf("%d bytes of peer show, %d series", b.Len(), len(ms))
}

// FuzzParseLnetctlShow: whatever lnetctl prints, the parser does not
// crash, counts at most one bad line per line, and keeps only NIs and peer
// NIs that lines opened.
func FuzzParseLnetctlShow(f *testing.F) {
	for _, v := range []string{"2.12", "2.14", "2.15", "2.16"} {
		f.Add(lnetFixture(f, v, "net_show.yaml"))
		if v != "2.14" {
			f.Add(lnetFixture(f, v, "peer_show.yaml"))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := parseLnetctlShow(data)
		lines := bytes.Count(data, []byte{'\n'}) + 1
		if s.bad.count > lines || len(s.nis)+len(s.peers) > lines {
			t.Errorf("%d bad, %d NIs, %d peers from %d lines", s.bad.count, len(s.nis), len(s.peers), lines)
		}
	})
}
