package collector

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The table form of a client's history (fixtures/gpfs/mmdiag-iohist-client.txt,
// see SOURCES-iohist): the 12 rows are read, each with its NSD server,
// and the four lines that are no row are counted.
func TestParseIohistClientTable(t *testing.T) {
	entries, bad := wantIohistRows(t, "mmdiag-iohist-client.txt", 12, 4)
	perServer := map[string]int{}
	for _, e := range entries {
		if e.kind != "cli" {
			t.Errorf("row %+v: kind %q, want cli", e, e.kind)
		}
		perServer[e.peer]++
	}
	if fmt.Sprint(perServer) != "map[10.10.0.11:3 10.10.0.12:4 10.10.0.13:3 10.10.0.14:2]" {
		t.Errorf("rows per NSD server %v", perServer)
	}
	slow := entries[6]
	if slow.peer != "10.10.0.11" || slow.seconds != 0.9025 || slow.write || slow.metadata || slow.diskSector != "5:7258157056" {
		t.Errorf("the 902.5 ms read: %+v", slow)
	}
	if e := entries[9]; !e.metadata || e.write || e.seconds != 0.000731 {
		t.Errorf("the inode read: %+v", e)
	}
	if !strings.Contains(bad.first, "line 18") || !strings.Contains(bad.first, "foobar") {
		t.Errorf("first bad line %q, want line 18 (foobar)", bad.first)
	}
}

// The server's table: srv rows name the local device.
func TestParseIohistServerTable(t *testing.T) {
	entries, _ := wantIohistRows(t, "mmdiag-iohist-server.txt", 10, 2)
	perDevice := map[string]int{}
	for _, e := range entries {
		perDevice[e.kind+" "+e.peer]++
	}
	if fmt.Sprint(perDevice) != "map[srv sdk:3 srv sdl:2 srv sdm:3 srv sdn:2]" {
		t.Errorf("rows per device %v", perDevice)
	}
}

// The -Y form, read by its HEADER's names: seven rows, a comma decimal
// among them, and two bad lines.
func TestParseIohistY(t *testing.T) {
	entries, _ := wantIohistRows(t, "mmdiag-iohist-Y.txt", 7, 2)
	if e := entries[0]; e.peer != "10.10.0.12" || e.diskSector != "2:29253025792" || e.start != "16:12:17.088625" {
		t.Errorf("first row %+v", e)
	}
	if e := entries[4]; math.Abs(e.seconds-0.003001) > 1e-12 {
		t.Errorf("the row with a comma decimal: %+v", e)
	}
	if e := entries[5]; e.kind != "srv" || e.peer != "sdl" {
		t.Errorf("the srv row: %+v", e)
	}
}

func TestParseIohistEmptyAndUnreadable(t *testing.T) {
	for _, in := range []string{"", "\n=== mmdiag: iohist ===\n\nI/O history:\n\n I/O start time RW    Buf type\n------ --\n"} {
		entries, bad, err := parseIohist([]byte(in))
		if err != nil || len(entries) != 0 || bad.count != 0 {
			t.Errorf("parseIohist(%q) = %d rows, %d bad, %v; want an empty history", in, len(entries), bad.count, err)
		}
	}
	if _, _, err := parseIohist([]byte("garbage\nmore garbage\n")); err == nil {
		t.Error("output with no readable row: no error")
	}
}

func mustParseIohistFixture(t *testing.T, name string) ([]iohistEntry, badLines) {
	t.Helper()
	return mustParseGPFSFixture(t, name, parseIohist)
}

// wantIohistRows parses the fixture name and stops the test unless it
// read rows rows and skipped skipped lines.
func wantIohistRows(t *testing.T, name string, rows, skipped int) ([]iohistEntry, badLines) {
	t.Helper()
	entries, bad := mustParseIohistFixture(t, name)
	if len(entries) != rows || bad.count != skipped {
		t.Fatalf("read %d rows and %d bad lines (first %s), want %d and %d", len(entries), bad.count, bad.first, rows, skipped)
	}
	return entries, bad
}

// mustParseGPFSFixture parses fixtures/gpfs/<name> with parse, failing the
// test when the file cannot be read or parse finds nothing readable.
func mustParseGPFSFixture[T any](t *testing.T, name string, parse func([]byte) (T, badLines, error)) (T, badLines) {
	t.Helper()
	v, bad, err := parse(readFixtureFile(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return v, bad
}

func readFixtureFile(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("fixtures", "gpfs", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// iohistRows writes a history in the table form: one row per second from
// first to last (seconds since midnight), to the servers in turn.
func iohistRows(first, last int, servers int) []byte {
	var b bytes.Buffer
	b.WriteString("\n=== mmdiag: iohist ===\n\nI/O history:\n\n I/O start time RW    Buf type disk:sectorNum     nSec  time ms  Type  Device/NSD ID         NSD node\n")
	b.WriteString("--------------- -- ----------- ----------------- -----  ------- ---- ------------------ ---------------\n")
	for s := first; s <= last; s++ {
		sec := s % 86400
		rw, buf := "R", "data"
		if s%2 == 1 {
			rw = "W"
		}
		if s%3 == 0 {
			buf = "inode"
		}
		fmt.Fprintf(&b, "%02d:%02d:%02d.%06d  %s %11s %5d:%-11d %5d %8.3f  cli   0A000001:00000%03d  nsd%d\n",
			sec/3600, sec/60%60, sec%60, s%1000000, rw, buf, s%7+1, s*8, 8, float64(s%50)+0.5, s%servers, s%servers)
	}
	return b.Bytes()
}

// The ring: two reads whose histories overlap count each I/O once; a read
// after the history turned over counts the I/Os that were never read.
// Counting every row of every read (what a parser without the memory of
// the last read does) gives 10 for the first two reads, not 7.
func TestIohistRingCountsEachIOOnce(t *testing.T) {
	var s gpfsIohistState
	d := newGPFSIohistDescs()
	read := func(first, last int) {
		t.Helper()
		entries, bad, err := parseIohist(iohistRows(first, last, 1))
		if err != nil || bad.count != 0 {
			t.Fatalf("rows %d-%d: %v, %d bad (%s)", first, last, err, bad.count, bad.first)
		}
		s.round(entries, &d, "")
	}
	total := func() (ios, lost, wraps uint64) {
		for _, sums := range s.totals.clients {
			for _, n := range sums.ios {
				ios += n
			}
		}
		return ios, s.totals.lost, s.totals.wraps
	}
	read(3600, 3604) // 01:00:00 to 01:00:04
	read(3602, 3606) // overlaps the first read by three rows
	if ios, lost, wraps := total(); ios != 7 || lost != 0 || wraps != 0 {
		t.Fatalf("after two overlapping reads: %d I/Os, %d lost, %d wraps; want 7, 0, 0", ios, lost, wraps)
	}
	read(3602, 3606) // the same history again: nothing new
	if ios, _, _ := total(); ios != 7 {
		t.Fatalf("a read of an unchanged history counted %d I/Os, want still 7", ios)
	}
	read(3610, 3614) // the ring turned over: 3607 to 3609 were never read
	if ios, lost, wraps := total(); ios != 12 || lost != 3 || wraps != 1 {
		t.Fatalf("after the ring turned over: %d I/Os, %d lost, %d wraps; want 12, 3, 1", ios, lost, wraps)
	}
	// Across midnight, the same.
	var m gpfsIohistState
	for _, r := range [][2]int{{86397, 86401}, {86403, 86407}} {
		entries, _, err := parseIohist(iohistRows(r[0], r[1], 1))
		if err != nil {
			t.Fatal(err)
		}
		m.round(entries, &d, "")
	}
	if m.totals.lost != 1 || m.totals.wraps != 1 {
		t.Errorf("across midnight: %d lost, %d wraps; want 1 and 1", m.totals.lost, m.totals.wraps)
	}
	// A history that is not full yet and shares nothing with the last
	// read (the daemon restarted) lost nothing.
	var r gpfsIohistState
	for _, rows := range [][2]int{{100, 109}, {200, 204}} {
		entries, _, _ := parseIohist(iohistRows(rows[0], rows[1], 1))
		r.round(entries, &d, "")
	}
	if r.totals.lost != 0 || r.totals.wraps != 0 {
		t.Errorf("after a restart: %d lost, %d wraps; want none", r.totals.lost, r.totals.wraps)
	}
}

// A client of 64 NSD servers: fewer than 10 series per server, however
// many I/Os, sectors and threads its history holds.
func TestIohistSeriesPerServer(t *testing.T) {
	var s gpfsIohistState
	d := newGPFSIohistDescs()
	for round := 0; round < 4; round++ {
		entries, _, err := parseIohist(iohistRows(round*512, round*512+511, 64))
		if err != nil {
			t.Fatal(err)
		}
		s.round(entries, &d, "")
	}
	perServer := map[string]int{}
	other := 0
	for _, m := range s.round(nil, &d, "") {
		pb := &dto.Metric{}
		if err := m.Write(pb); err != nil {
			t.Fatal(err)
		}
		server := ""
		for _, lp := range pb.GetLabel() {
			if lp.GetName() == "nsd_server" {
				server = lp.GetValue()
			}
		}
		if server == "" {
			other++
			continue
		}
		perServer[server]++
	}
	if len(perServer) != 64 {
		t.Fatalf("%d servers, want 64", len(perServer))
	}
	for server, n := range perServer {
		if n >= 10 {
			t.Errorf("server %s has %d series, want fewer than 10", server, n)
		}
	}
	if other > 5 {
		t.Errorf("%d series without a server, want the 4 of the ring and no more", other)
	}
}

// The collector on the fake mmdiag: the client fixture's 12 I/Os per
// server, direction and class, its bad lines counted, and the second run
// of the same history adds nothing.
func TestGPFSIohistCollector(t *testing.T) {
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.mmgetstatePath, cfg.mmhealthPath = "", ""
	cfg.mmdiagPath = fixturePath(t, "gpfs", "mmdiag")
	cfg.iohist, cfg.iohistInterval, cfg.waitersInterval = true, time.Hour, time.Hour
	c := newTestGPFS(t, cfg)
	file := filepath.Join("fixtures", "expected", "gpfs_iohist.prom")
	reg := newTestRegistry("gpfs", c, nil)
	compareWithFile(t, reg, file, metricNames(t, file)...)

	var hist *dto.Histogram
	for _, s := range gatherSeries(t, reg) {
		if s.name == "plateau_gpfs_iohist_io_duration_seconds" && s.metric.GetLabel()[0].GetValue() == "10.10.0.11" {
			hist = s.metric.GetHistogram()
		}
	}
	if hist == nil || hist.GetSampleCount() != 3 || math.Abs(hist.GetSampleSum()-0.9075) > 1e-9 || hist.GetSchema() != 0 {
		t.Fatalf("native histogram of 10.10.0.11: %v", hist)
	}
	if _, err := c.iohist(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := parseErrorCount(c, gpfsSourceIohist); n != 8 {
		t.Errorf("parse errors after two runs: %d, want 8", n)
	}
	compareWithFile(t, reg, file, "plateau_gpfs_iohist_ios_total", "plateau_gpfs_iohist_io_seconds_total")
}

// The server's view: its disks, and its name for the rules' join.
func TestGPFSIohistServer(t *testing.T) {
	entries, _ := mustParseIohistFixture(t, "mmdiag-iohist-server.txt")
	var s gpfsIohistState
	d := newGPFSIohistDescs()
	ms := s.round(entries, &d, "nsd3")
	got := map[string]float64{}
	for _, m := range ms {
		pb := &dto.Metric{}
		if err := m.Write(pb); err != nil {
			t.Fatal(err)
		}
		key := m.Desc().String()
		key = key[strings.Index(key, `"`)+1:]
		key = key[:strings.Index(key, `"`)]
		for _, lp := range pb.GetLabel() {
			key += "," + lp.GetValue()
		}
		got[key] = pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	for key, want := range map[string]float64{
		"plateau_gpfs_iohist_disk_ios_total,data,sdm,read":         3,
		"plateau_gpfs_iohist_disk_io_seconds_total,data,sdl,write": 0.034902,
		"plateau_gpfs_iohist_disk_ios_total,metadata,sdn,write":    2,
		"plateau_gpfs_iohist_server_info,nsd3":                     1,
		"plateau_gpfs_iohist_entries":                              10,
	} {
		if v, ok := got[key]; !ok || math.Abs(v-want) > 1e-12 {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	for key := range got {
		if strings.HasPrefix(key, "plateau_gpfs_iohist_ios_total") {
			t.Errorf("a server-only history exported client series: %s", key)
		}
	}
}

// iohistJunk accepts the non-blank lines that cannot be a row nor the
// table's decoration: a first field that is no time of day.
func iohistJunk(line string) bool {
	t := strings.TrimSpace(line)
	if t == "" || iohistDecoration(t) || strings.HasPrefix(t, "mmdiag:") {
		return false
	}
	_, ok := parseTimeOfDay(strings.Fields(t)[0])
	return !ok
}

// iohistRead is what parseIohist read, for the junk property.
func iohistRead(b []byte) (any, badLines, error) { return asJunkParser(parseIohist)(b) }

func FuzzGPFSIohist(f *testing.F) {
	for _, name := range []string{"mmdiag-iohist-client.txt", "mmdiag-iohist-server.txt", "mmdiag-iohist-Y.txt"} {
		f.Add(readGPFSFixture(f, name))
	}
	f.Add([]byte("foobar\n23:59:59.999999 W data 1:2 8 0,5 cli x y\n00:00:00 R inode 1:1 8 1 srv sda\n"))
	client := readGPFSFixture(f, "mmdiag-iohist-client.txt")
	yFixture := readGPFSFixture(f, "mmdiag-iohist-Y.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, client, out, iohistJunk, nil, iohistRead)
		checkJunk(t, yFixture, out, yJunk(yFixture), nil, iohistRead)
		entries, _, _ := parseIohist(out)
		for _, e := range entries {
			if !(e.seconds >= 0) || math.IsInf(e.seconds, 0) || e.second < 0 || e.second >= 86401 {
				t.Fatalf("entry %+v", e)
			}
		}
		// Whatever was read, a round exports valid metrics.
		var s gpfsIohistState
		d := newGPFSIohistDescs()
		reg := prometheus.NewPedanticRegistry()
		s.round(entries, &d, "")
		if err := reg.Register(metricsCollector(s.round(entries, &d, ""))); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("gather: %v", err)
		}
	})
}

// metricsCollector hands out fixed metrics, for a pedantic gather.
type metricsCollector []prometheus.Metric

func (m metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	seen := map[*prometheus.Desc]bool{}
	for _, x := range m {
		if !seen[x.Desc()] {
			seen[x.Desc()] = true
			ch <- x.Desc()
		}
	}
}

func (m metricsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range m {
		ch <- x
	}
}

// genIohist is a full default history (512 I/Os) of a client of 64 NSD
// servers, for the benchmark.
func genIohist(first int) []byte { return iohistRows(first, first+511, 64) }

// An NSD server's collector on the fake mmdiag printing the server
// fixture: its disks, and the name its clients see it by (here the
// address the client fixture names), compared with the expected
// exposition, which the dashboards' tests also evaluate the rules on.
func TestGPFSIohistServerCollector(t *testing.T) {
	t.Setenv("FAKE_GPFS_IOHIST", "server")
	cfg := fakeGPFS(t, "mmpmon", 30*time.Second)
	cfg.mmgetstatePath, cfg.mmhealthPath = "", ""
	cfg.mmdiagPath = fixturePath(t, "gpfs", "mmdiag")
	cfg.iohist, cfg.iohistInterval, cfg.waitersInterval = true, time.Hour, time.Hour
	cfg.iohistServerName = "10.10.0.13"
	file := filepath.Join("fixtures", "expected", "gpfs_iohist_server.prom")
	compareWithFile(t, newTestRegistry("gpfs", newTestGPFS(t, cfg), nil), file, metricNames(t, file)...)
}
