package mfscluster

import (
	"reflect"
	"strings"
	"testing"
)

// The harness itself needs root; these check what it parses and
// validates without a cluster.

func TestParseFileInfo(t *testing.T) {
	// mfsfileinfo of MooseFS 3.0.117 on a two-chunk file, one chunk of
	// which has lost a copy.
	out := "/mnt/f:\n" +
		"\tchunk 0: 0000000000000001_00000001 / (id:1 ver:1)\n" +
		"\t\tcopy 1: 10.231.0.11:9422 (status:VALID)\n" +
		"\t\tcopy 2: 10.231.0.13:9422 (status:VALID)\n" +
		"\tchunk 1: 0000000000000002_00000001 / (id:2 ver:1)\n" +
		"\t\tcopy 1: 10.231.0.12:9422 (status:INVALID)\n" +
		"\t\tcopy 2: 10.231.0.11:9422 (status:VALID)\n" +
		"\tchunk 2: 0000000000000003_00000001 / (id:3 ver:1)\n" +
		"\t\tno valid copies !!!\n"
	got, err := parseFileInfo(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Chunk{
		{Index: 0, Servers: []string{"10.231.0.11", "10.231.0.13"}},
		{Index: 1, Servers: []string{"10.231.0.11"}},
		{Index: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseFileInfo = %+v, want %+v", got, want)
	}
	if _, err := parseFileInfo("\t\tcopy 1: 10.231.0.11:9422 (status:VALID)\n"); err == nil {
		t.Error("a copy line before any chunk line was accepted")
	}
}

func TestOptionsDefaultsAndLimits(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Options{ChunkServers: 3, Clients: 2, DiskSize: 1 << 30, FSType: "ext4"}); o != want {
		t.Errorf("defaults = %+v, want %+v", o, want)
	}
	for _, bad := range []Options{
		{ChunkServers: 27},
		{Clients: -1},
		{DiskSize: 256 << 20},
		{FSType: "btrfs"},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestConfigsNameEverythingTheDaemonsWouldOtherwiseTakeFromEtc(t *testing.T) {
	// A daemon that fell back to /etc/mfs or /var/lib/mfs would share
	// state with the machine's own MooseFS or with another host.
	for name, cfg := range map[string]string{
		"master":      masterConfig("/d/master/var"),
		"chunkserver": chunkServerConfig("/d/cs-a/var", "A", "10.231.0.1"),
	} {
		for _, key := range []string{"WORKING_USER = root", "NICE_LEVEL = 0", "DATA_PATH = /d/"} {
			if !strings.Contains(cfg, key) {
				t.Errorf("%s config lacks %q:\n%s", name, key, cfg)
			}
		}
		if strings.Contains(cfg, "/etc/mfs") || strings.Contains(cfg, "/var/lib/mfs") {
			t.Errorf("%s config names the machine's MooseFS paths:\n%s", name, cfg)
		}
	}
	cs := chunkServerConfig("/d/cs-a/var", "A", "10.231.0.1")
	for _, key := range []string{"LABELS = A\n", "MASTER_HOST = 10.231.0.1\n", "HDD_CONF_FILENAME = /d/cs-a/var/mfshdd.cfg\n"} {
		if !strings.Contains(cs, key) {
			t.Errorf("chunkserver config lacks %q:\n%s", key, cs)
		}
	}
}

// TestParseLinkBytes reads the counters of a veth as iproute2 6.1 prints
// them (`ip -n NS -s -j link show dev eth0`, captured on this machine;
// its tx count raised past 32 bits, and its qdisc the tbf of a shaped
// link), and refuses output without them.
func TestParseLinkBytes(t *testing.T) {
	out := `[{"ifindex":3,"link":"p1","ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"tbf","operstate":"UP","linkmode":"DEFAULT","group":"default","txqlen":1000,"link_type":"ether","address":"9a:7d:3e:55:8d:1a","broadcast":"ff:ff:ff:ff:ff:ff","stats64":{"rx":{"bytes":266,"packets":3,"errors":0,"dropped":0,"over_errors":0,"multicast":0},"tx":{"bytes":18446744073,"packets":3,"errors":0,"dropped":0,"carrier_errors":0,"collisions":0}}}]`
	sent, received, err := parseLinkBytes([]byte(out))
	if err != nil || sent != 18446744073 || received != 266 {
		t.Errorf("parseLinkBytes = %d, %d, %v; want 18446744073, 266", sent, received, err)
	}
	for _, bad := range []string{``, `[]`, `[{"ifname":"eth0"}]`, `[{"stats64":{"rx":{"bytes":1}}}]`, out[:len(out)-1] + `,` + out[1:]} {
		if s, r, err := parseLinkBytes([]byte(bad)); err == nil {
			t.Errorf("parseLinkBytes(%q) = %d, %d, no error", bad, s, r)
		}
	}
}
