package collector

import (
	"bytes"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/procfs/sysfs"
)

func TestInfiniBandCollector(t *testing.T) {
	c, err := newInfiniBandCollector(filepath.Join("fixtures", "sys"), log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("fixtures", "expected", "infiniband.prom")
	compareWithFile(t, newTestRegistry("infiniband", c, nil), file, metricNames(t, file)...)
}

func TestInfiniBandNoHCA(t *testing.T) {
	c, err := newInfiniBandCollector(t.TempDir(), log.NewNopLogger())
	wantNoData(t, c, err, "without /sys/class/infiniband")
}

// A counter that saturates between scrapes is flagged on the scrape where
// it reaches its maximum, so a flat rate is explained.
func TestInfiniBandSaturationAppears(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class", "infiniband", "mlx5_9", "ports", "1")
	write := func(name, value string) { t.Helper(); benchWrite(t, filepath.Join(port, name), value) }
	benchWrite(t, filepath.Join(root, "class", "infiniband", "mlx5_9", "fw_ver"), "1.0")
	write("link_layer", "InfiniBand")
	write("state", "4: ACTIVE")
	write("phys_state", "5: LinkUp")
	write("rate", "100 Gb/sec (4X EDR)")
	write("counters/link_downed", "254")

	c, err := newInfiniBandCollector(root, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	saturated := func() float64 {
		t.Helper()
		ms, err := collectAll(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Desc() == c.saturatedDesc.desc {
				return metricValue(t, m)
			}
		}
		t.Fatal("no saturation series")
		return 0
	}
	if v := saturated(); v != 0 {
		t.Errorf("link_downed at 254 flagged saturated (%v)", v)
	}
	write("counters/link_downed", "255")
	if v := saturated(); v != 1 {
		t.Errorf("link_downed at 255 (8-bit maximum) not flagged (%v)", v)
	}
}

func TestIBCounterSaturated(t *testing.T) {
	data := ibCounter{unit: 4, width: 32}
	if !data.saturated(4 * 0xFFFFFFFF) {
		t.Error("32-bit data counter at its maximum (in bytes) not flagged")
	}
	if data.saturated(0xFFFFFFFF) {
		t.Error("data counter below its maximum flagged")
	}
	wide := ibCounter{unit: 4}
	if wide.saturated(4 * 0xFFFFFFFF) {
		t.Error("64-bit counter flagged")
	}
	nibble, short := ibCounter{unit: 1, width: 4}, ibCounter{unit: 1, width: 16}
	if !nibble.saturated(15) || nibble.saturated(14) || !short.saturated(65535) {
		t.Error("narrow counters misjudged")
	}
}

// The collector reads sysfs itself; on the fixture tree (two HCA kinds, one
// with counters_ext) and on the benchmark's tree it must read what procfs's
// sysfs.InfiniBandClass reads, which the fixtures must also stay readable by.
func TestInfiniBandMatchesProcfs(t *testing.T) {
	benchRoot := t.TempDir()
	genInfiniBand(t, benchRoot)
	for _, root := range []string{filepath.Join("fixtures", "sys"), benchRoot} {
		class := procfsClass(t, root, sysfs.FS.InfiniBandClass)
		c, err := newInfiniBandCollector(root, log.NewNopLogger())
		if err != nil {
			t.Fatal(err)
		}
		compared := 0
		for name, want := range class {
			got := c.readDevice(name)
			if !got.ok || len(got.errs) > 0 {
				t.Fatalf("%s %s: %v", root, name, got.errs)
			}
			if got.boardID != want.BoardID || got.firmwareVersion != want.FirmwareVersion || got.hcaType != want.HCAType {
				t.Errorf("%s: read %q %q %q, procfs %q %q %q", name, got.boardID, got.firmwareVersion, got.hcaType,
					want.BoardID, want.FirmwareVersion, want.HCAType)
			}
			if len(got.ports) != len(want.Ports) {
				t.Fatalf("%s: %d ports, procfs %d", name, len(got.ports), len(want.Ports))
			}
			for _, p := range got.ports {
				wp := want.Ports[uint(p.number)]
				if p.rate != wp.Rate || p.stateID != uint64(wp.StateID) || p.physStateID != uint64(wp.PhysStateID) {
					t.Errorf("%s port %d: rate %d state %d phys %d, procfs %d %d %d", name, p.number,
						p.rate, p.stateID, p.physStateID, wp.Rate, wp.StateID, wp.PhysStateID)
				}
				for i, ctr := range c.counters {
					legacy, base := procfsIBCounter(&wp.Counters, ctr.name)
					wantV, wantLegacy := base, false
					if legacy != nil {
						wantV, wantLegacy = legacy, true
					}
					got := p.counters[i]
					switch {
					case wantV == nil && got.present:
						t.Errorf("%s port %d %s: read %d, procfs has none", name, p.number, ctr.name, got.value)
					case wantV != nil && (!got.present || got.value != *wantV || got.legacy != wantLegacy):
						t.Errorf("%s port %d %s: read %d (present %v, legacy %v), procfs %d (legacy %v)", name, p.number, ctr.name,
							got.value, got.present, got.legacy, *wantV, wantLegacy)
					case wantV != nil:
						compared++
					}
				}
			}
		}
		if compared < 20 {
			t.Errorf("%s: only %d counters compared", root, compared)
		}
	}
}

// procfsIBCounter returns procfs's counters_ext and counters values of the
// counter file name.
func procfsIBCounter(cs *sysfs.InfiniBandCounters, name string) (legacy, base *uint64) {
	fields, ok := map[string][2]*uint64{
		"port_rcv_data":                   {cs.LegacyPortRcvData64, cs.PortRcvData},
		"port_xmit_data":                  {cs.LegacyPortXmitData64, cs.PortXmitData},
		"port_rcv_packets":                {cs.LegacyPortRcvPackets64, cs.PortRcvPackets},
		"port_xmit_packets":               {cs.LegacyPortXmitPackets64, cs.PortXmitPackets},
		"unicast_rcv_packets":             {cs.LegacyPortUnicastRcvPackets, cs.UnicastRcvPackets},
		"unicast_xmit_packets":            {cs.LegacyPortUnicastXmitPackets, cs.UnicastXmitPackets},
		"multicast_rcv_packets":           {cs.LegacyPortMulticastRcvPackets, cs.MulticastRcvPackets},
		"multicast_xmit_packets":          {cs.LegacyPortMulticastXmitPackets, cs.MulticastXmitPackets},
		"port_xmit_wait":                  {nil, cs.PortXmitWait},
		"symbol_error":                    {nil, cs.SymbolError},
		"link_error_recovery":             {nil, cs.LinkErrorRecovery},
		"link_downed":                     {nil, cs.LinkDowned},
		"port_rcv_errors":                 {nil, cs.PortRcvErrors},
		"port_rcv_remote_physical_errors": {nil, cs.PortRcvRemotePhysicalErrors},
		"port_rcv_switch_relay_errors":    {nil, cs.PortRcvSwitchRelayErrors},
		"port_rcv_constraint_errors":      {nil, cs.PortRcvConstraintErrors},
		"port_xmit_constraint_errors":     {nil, cs.PortXmitConstraintErrors},
		"port_xmit_discards":              {nil, cs.PortXmitDiscards},
		"port_rcv_discards":               {nil, cs.PortRcvDiscards},
		"local_link_integrity_errors":     {nil, cs.LocalLinkIntegrityErrors},
		"excessive_buffer_overrun_errors": {nil, cs.ExcessiveBufferOverrunErrors},
		"VL15_dropped":                    {nil, cs.VL15Dropped},
	}[name]
	if !ok {
		panic("no procfs field for InfiniBand counter " + name)
	}
	return fields[0], fields[1]
}

// A counter the driver lacks ("N/A (no PMA)") is absent, not an error; a
// counter that reads garbage fails the collector but loses nothing else;
// hw_counters, which the collector does not export, are never read.
func TestInfiniBandAbsentAndBrokenCounters(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class", "infiniband", "hfi1_0", "ports", "1")
	write := func(rel, value string) {
		t.Helper()
		benchWrite(t, filepath.Join(root, "class", "infiniband", "hfi1_0", rel), value)
	}
	write("fw_ver", "1.27.0")
	write("ports/1/state", "4: ACTIVE")
	write("ports/1/phys_state", "5: LinkUp")
	write("ports/1/rate", "100 Gb/sec (4X EDR)")
	write("ports/1/counters/port_rcv_discards", "N/A (no PMA)")
	write("ports/1/counters/symbol_error", "garbage")
	write("ports/1/counters/link_downed", "3")
	// A directory where a hw_counters file would be: reading it would fail.
	if err := os.MkdirAll(filepath.Join(port, "hw_counters", "rx_write_requests"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := newInfiniBandCollector(root, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP plateau_infiniband_port_link_downed_total Times the link error recovery process failed and the link went down.
# TYPE plateau_infiniband_port_link_downed_total counter
plateau_infiniband_port_link_downed_total{device="hfi1_0",port="1"} 3
# HELP plateau_infiniband_port_rate_bytes_per_second Signalling rate the port trained to, in bytes per second; a drop means the link trained down.
# TYPE plateau_infiniband_port_rate_bytes_per_second gauge
plateau_infiniband_port_rate_bytes_per_second{device="hfi1_0",port="1"} 1.25e+10
` + scrapeSuccessHelp + `
plateau_scrape_collector_success{collector="infiniband"} 1
`
	// The garbage symbol_error costs that counter only; N/A is no error.
	if err := testutil.GatherAndCompare(newTestRegistry("infiniband", c, nil), strings.NewReader(want),
		"plateau_infiniband_port_link_downed_total", "plateau_infiniband_port_rate_bytes_per_second",
		"plateau_infiniband_port_discards_received_total", "plateau_infiniband_port_symbol_errors_total",
		"plateau_scrape_collector_success"); err != nil {
		t.Error(err)
	}
	if n, _ := parseErrorCount(c, ibSourceCounters); n != 1 {
		t.Errorf("counter parse errors = %d, want symbol_error's 1", n)
	}
	if n, ok := parseErrorCount(c, ibSourcePorts); !ok || n != 0 {
		t.Errorf("port parse errors = %d (present %v), want 0", n, ok)
	}
}

// ibHCA is the files of an HCA, name, with one InfiniBand port whose
// state file holds state and whose other files are those of a trained EDR
// link: each a path under <sysfs>/class/infiniband, and its content.
func ibHCA(name, state string) map[string]string {
	return map[string]string{
		name + "/fw_ver":             "16.35.2000",
		name + "/ports/1/link_layer": "InfiniBand",
		name + "/ports/1/state":      state,
		name + "/ports/1/phys_state": "5: LinkUp",
		name + "/ports/1/rate":       "100 Gb/sec (4X EDR)",
	}
}

// newTestInfiniBand writes the files of hcas (see ibHCA) into a new sysfs
// tree and returns the collector reading it.
func newTestInfiniBand(t *testing.T, hcas ...map[string]string) *infinibandCollector {
	t.Helper()
	root := t.TempDir()
	for _, files := range hcas {
		for rel, value := range files {
			benchWrite(t, filepath.Join(root, "class", "infiniband", filepath.FromSlash(rel)), value)
		}
	}
	c, err := newInfiniBandCollector(root, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// One HCA whose port state is garbage loses that port, counted, and the
// other HCAs are still exported.
func TestInfiniBandBrokenHCA(t *testing.T) {
	c := newTestInfiniBand(t, ibHCA("mlx5_0", "4: ACTIVE"), ibHCA("mlx5_1", "garbage"))
	ms, err := collectAll(c)
	if err != nil {
		t.Errorf("Update error = %v, want none", err)
	}
	if n, _ := parseErrorCount(c, ibSourcePorts); n != 1 {
		t.Errorf("port parse errors = %d, want mlx5_1's state", n)
	}
	rates := 0
	for _, m := range ms {
		if m.Desc() == c.rate.desc {
			rates++
		}
	}
	if rates != 1 {
		t.Errorf("got %d port rates, want the good HCA's one", rates)
	}
}

func FuzzParseIBStateAndRate(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "5: LinkUp", "1: DOWN", "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)",
		"53.125 Gb/sec (1X HDR)", "400 Gb/sec (4X NDR)", "garbage", ":", " ", "-1 Gb/sec", "1e400 Gb/sec", "NaN Gb/sec", "Inf Gb/sec"} {
		f.Add(s)
	}
	f.Add("garbage\n0x\n\n-3\nN/A (no PMA)\n18446744073709551616")
	rig := newIBJunkRig(f, filepath.Join("fixtures", "sys", "class", "infiniband", "mlx5_0"))
	f.Fuzz(func(t *testing.T, s string) {
		checkIBJunk(t, rig, s)
		if id, err := parseIBState(s); err == nil && id > 1<<32-1 {
			t.Errorf("state %q parsed to %d, wider than 32 bits", s, id)
		}
		rate, err := parseIBRate(s)
		if err != nil {
			return
		}
		// A rate is the Gb/s in front of the first blank, in bytes/s.
		value, _, _ := strings.Cut(s, " ")
		gbits, perr := strconv.ParseFloat(value, 64)
		if perr != nil || !(gbits >= 0) || math.IsInf(gbits, 0) {
			t.Fatalf("rate %q accepted (%d) though %q is not a finite non-negative number", s, rate, value)
		}
		if want := uint64(gbits * 125e6); rate != want {
			t.Errorf("rate %q = %d, want %d", s, rate, want)
		}
	})
}

// ibJunk accepts the values no counter file could hold: neither a number
// nor N/A, nor blank (a blank file is read as absent by neither procfs
// nor this collector's tests, so it is left out), and short enough to be
// read whole.
func ibJunk(v string) bool {
	v = string(bytes.TrimSpace([]byte(v)))
	if v == "" || len(v) > 1000 || strings.HasPrefix(v, "N/A") {
		return false
	}
	_, err := strconv.ParseUint(v, 0, 64)
	return err != nil
}

// ibJunkRig is a copy of a fixture HCA that checkIBJunk writes junk
// into, made once per fuzz process: copying the tree for each input would
// make the target a file-copy benchmark.
type ibJunkRig struct {
	dir  string // the copy's directory
	c    *infinibandCollector
	want ibDevice // the copy as read before any junk
}

func newIBJunkRig(tb testing.TB, hca string) *ibJunkRig {
	tb.Helper()
	root := tb.TempDir()
	dir := filepath.Join(root, "class", "infiniband", filepath.Base(hca))
	if err := os.CopyFS(dir, os.DirFS(hca)); err != nil {
		tb.Fatal(err)
	}
	c, err := newInfiniBandCollector(root, nil)
	if err != nil {
		tb.Fatal(err)
	}
	r := &ibJunkRig{dir: dir, c: c, want: c.readDevice(filepath.Base(hca))}
	if w := r.want; !w.ok || len(w.errs) > 0 || w.badPorts.count+w.badCounters.count > 0 || len(w.ports) == 0 {
		tb.Fatalf("the fixture HCA does not read cleanly: %+v", w)
	}
	return r
}

// checkIBJunk is the "junk among good rows" property for sysfs: the lines
// of junk that are no counter value are written into counter files of the
// rig's HCA (which counter, from the value's hash); every other counter of
// every port must read as before, and each overwritten file must be
// counted. The files are put back afterwards.
func checkIBJunk(t *testing.T, r *ibJunkRig, junk string) {
	t.Helper()
	c, want := r.c, r.want
	values := junkLines([]byte(junk), ibJunk)
	type slot struct{ port, counter int }
	junked := map[slot]bool{}
	for i, v := range values {
		h := fnv.New32a()
		h.Write([]byte(v))
		n := int(h.Sum32()) + i
		sl := slot{n % len(want.ports), (n / len(want.ports)) % len(c.counters)}
		if !want.ports[sl.port].counters[sl.counter].present {
			continue // only files that exist hold a value to spoil
		}
		file := filepath.Join(r.dir, "ports", strconv.FormatUint(want.ports[sl.port].number, 10), "counters", c.counters[sl.counter].name)
		original, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !junked[sl] {
			t.Cleanup(func() {
				if err := os.WriteFile(file, original, 0o644); err != nil {
					t.Error(err)
				}
			})
		}
		if err := os.WriteFile(file, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		junked[sl] = true
	}
	got := c.readDevice(filepath.Base(r.dir))
	if len(got.errs) > 0 || len(got.ports) != len(want.ports) || got.badPorts.count > 0 {
		t.Fatalf("junk counter values cost more than themselves: errs %v, %d ports of %d", got.errs, len(got.ports), len(want.ports))
	}
	if got.badCounters.count != len(junked) {
		t.Errorf("counted %d bad counter files (first %s), want %d", got.badCounters.count, got.badCounters.first, len(junked))
	}
	for p := range want.ports {
		for k := range c.counters {
			g, w := got.ports[p].counters[k], want.ports[p].counters[k]
			if junked[slot{p, k}] {
				if g.present {
					t.Errorf("port %d %s read from a junk value: %+v", want.ports[p].number, c.counters[k].name, g)
				}
				continue
			}
			if g != w {
				t.Errorf("port %d %s = %+v, want %+v as before the junk", want.ports[p].number, c.counters[k].name, g, w)
			}
		}
	}
}

// A node where not one port parses fails the collector: HCAs without
// ports would read as HCAs whose cables were pulled.
func TestInfiniBandNoReadablePort(t *testing.T) {
	c := newTestInfiniBand(t, ibHCA("mlx5_0", "garbage"))
	if _, err := collectAll(c); err == nil || !strings.Contains(err.Error(), "no InfiniBand port could be read") {
		t.Errorf("Update error = %v, want one saying no port could be read", err)
	}
	if n, _ := parseErrorCount(c, ibSourcePorts); n != 1 {
		t.Errorf("port parse errors = %d, want 1", n)
	}
}
