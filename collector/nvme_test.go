package collector

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/procfs/sysfs"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// readSMARTFixture decodes a hex dump of a SMART log page; lines starting
// with '#' are comments.
func readSMARTFixture(t testing.TB, name string) []byte {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("fixtures", "nvme", name))
	if err != nil {
		t.Fatal(err)
	}
	var digits strings.Builder
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, "#") {
			digits.WriteString(strings.TrimSpace(line))
		}
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func newTestNVMe(t *testing.T, devDir string, logger log.Logger) *nvmeCollector {
	t.Helper()
	if logger == nil {
		logger = log.NewNopLogger()
	}
	c, err := newNVMeCollector(filepath.Join("fixtures", "sys"), devDir, 2*time.Second, logger)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Without device nodes (as for the daemon pointed at the fixture tree) every
// controller is listed and reported without SMART data, and the collector
// itself succeeds.
func TestNVMeCollectorInfo(t *testing.T) {
	c := newTestNVMe(t, t.TempDir(), nil)
	file := filepath.Join("fixtures", "expected", "nvme.prom")
	compareWithFile(t, newTestRegistry("nvme", c, nil), file, metricNames(t, file)...)
}

func TestNVMeNoControllers(t *testing.T) {
	c, err := newNVMeCollector(t.TempDir(), t.TempDir(), time.Second, log.NewNopLogger())
	wantNoData(t, c, err, "without /sys/class/nvme")
}

// The SMART problem of each controller is logged once, not on every scrape.
// nvme0 and nvme1 point at /dev/null, so the real ioctl runs and fails with
// ENOTTY; nvme2 has no device node; nvme3 is not live.
func TestNVMeSMARTProblemLoggedOnce(t *testing.T) {
	devDir := t.TempDir()
	for _, n := range []string{"nvme0", "nvme1"} {
		if err := os.Symlink("/dev/null", filepath.Join(devDir, n)); err != nil {
			t.Fatal(err)
		}
	}
	logs := &logBuffer{}
	c := newTestNVMe(t, devDir, logs)
	for i := 0; i < 3; i++ {
		ms, err := collectAll(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Desc() == c.smartAvailable.desc && metricValue(t, m) != 0 {
				t.Errorf("SMART reported available from /dev/null: %v", m.Desc())
			}
		}
	}
	for dev, why := range map[string]string{
		"nvme0": "inappropriate ioctl",
		"nvme1": "inappropriate ioctl",
		"nvme2": "no such file",
		"nvme3": `controller state is \"connecting\"`,
	} {
		if n := logs.count("device=" + dev); n != 1 {
			t.Errorf("%s logged %d times over 3 scrapes, want once", dev, n)
		}
		if n := logs.count(why); n == 0 {
			t.Errorf("no log line explains %q", why)
		}
	}
}

// smartFixtureCollector exports decoded SMART fixtures through the real
// conversion code, standing in only for the ioctl, which needs hardware.
type smartFixtureCollector struct {
	c    *nvmeCollector
	logs map[string]smartLog
}

func (s smartFixtureCollector) Update(ch chan<- prometheus.Metric) error {
	devs := make([]string, 0, len(s.logs))
	for d := range s.logs {
		devs = append(devs, d)
	}
	sort.Strings(devs)
	for _, d := range devs {
		s.c.smartMetrics(ch, d, s.logs[d])
	}
	return nil
}

func TestNVMeSMARTMetrics(t *testing.T) {
	logs := map[string]smartLog{}
	for dev, file := range map[string]string{"nvme0": "smart-healthy.hex", "nvme1": "smart-worn-hot.hex", "nvme9": "smart-u128.hex"} {
		l, err := parseSMARTLog(readSMARTFixture(t, file))
		if err != nil {
			t.Fatal(err)
		}
		logs[dev] = l
	}
	c := newTestNVMe(t, t.TempDir(), nil)
	reg := newTestRegistry("nvme_smart", smartFixtureCollector{c: c, logs: logs}, nil)
	file := filepath.Join("fixtures", "expected", "nvme_smart.prom")
	compareWithFile(t, reg, file, metricNames(t, file)...)
}

func TestParseSMARTLog(t *testing.T) {
	l, err := parseSMARTLog(readSMARTFixture(t, "smart-worn-hot.hex"))
	if err != nil {
		t.Fatal(err)
	}
	if l.criticalWarning != 0x05 || l.temperatureKelvin != 357 || l.availableSpare != 4 ||
		l.availableSpareThreshold != 10 || l.percentageUsed != 103 || l.mediaErrors != 12 ||
		l.errorLogEntries != 4096 || l.powerOnHours != 43800 || l.warningTempMinutes != 1440 ||
		l.criticalTempMinutes != 35 || l.sensorKelvin[0] != 357 || l.sensorKelvin[1] != 0 {
		t.Errorf("decoded %+v", l)
	}
	u, err := parseSMARTLog(readSMARTFixture(t, "smart-u128.hex"))
	if err != nil {
		t.Fatal(err)
	}
	if u.dataUnitsRead != math.Exp2(64)+5 || u.dataUnitsWritten != math.Exp2(65) || u.hostReadCommands != math.Exp2(64) {
		t.Errorf("128-bit counters decoded as %v %v %v", u.dataUnitsRead, u.dataUnitsWritten, u.hostReadCommands)
	}
	for _, n := range []int{0, 511, 513, 4096} {
		if _, err := parseSMARTLog(make([]byte, n)); err == nil {
			t.Errorf("a %d-byte log page was accepted", n)
		}
	}
}

// The command must match the kernel's struct nvme_passthru_cmd byte for byte.
func TestSMARTGetLogCmdLayout(t *testing.T) {
	var cmd nvmePassthruCmd
	if s := unsafe.Sizeof(cmd); s != 72 {
		t.Fatalf("struct is %d bytes, want 72", s)
	}
	for field, want := range map[string][2]uintptr{
		"nsid":      {unsafe.Offsetof(cmd.nsid), 4},
		"addr":      {unsafe.Offsetof(cmd.addr), 24},
		"dataLen":   {unsafe.Offsetof(cmd.dataLen), 36},
		"cdw10":     {unsafe.Offsetof(cmd.cdw10), 40},
		"timeoutMS": {unsafe.Offsetof(cmd.timeoutMS), 64},
		"result":    {unsafe.Offsetof(cmd.result), 68},
	} {
		if want[0] != want[1] {
			t.Errorf("%s at offset %d, want %d", field, want[0], want[1])
		}
	}
	buf := make([]byte, smartLogSize)
	cmd = smartGetLogCmd(buf, 2*time.Second)
	if cmd.opcode != 0x02 || cmd.nsid != 0xFFFFFFFF || cmd.cdw10 != 0x007F0002 || cmd.dataLen != 512 || cmd.timeoutMS != 2000 {
		t.Errorf("command = %+v", cmd)
	}
	if cmd.addr != uint64(uintptr(unsafe.Pointer(&buf[0]))) {
		t.Error("command does not point at the buffer")
	}
	// _IOWR('N', 0x41, 72 bytes): direction 3, size, type, number.
	if want := uint32(3)<<30 | 72<<16 | 'N'<<8 | 0x41; nvmeIoctlAdminCmd != want {
		t.Errorf("ioctl number %#x, want %#x", nvmeIoctlAdminCmd, want)
	}
}

// encodeSMARTLog is the inverse of parseSMARTLog for counters that fit in
// 64 bits, used by the fuzz target to check every field's offset.
func encodeSMARTLog(l smartLog) []byte {
	b := make([]byte, smartLogSize)
	le := binary.LittleEndian
	b[0] = l.criticalWarning
	le.PutUint16(b[1:], l.temperatureKelvin)
	b[3], b[4], b[5] = l.availableSpare, l.availableSpareThreshold, l.percentageUsed
	for off, v := range map[int]float64{
		32: l.dataUnitsRead, 48: l.dataUnitsWritten, 64: l.hostReadCommands, 80: l.hostWriteCommands,
		96: l.controllerBusyMinutes, 112: l.powerCycles, 128: l.powerOnHours, 144: l.unsafeShutdowns,
		160: l.mediaErrors, 176: l.errorLogEntries,
	} {
		le.PutUint64(b[off:], uint64(v))
	}
	le.PutUint32(b[192:], l.warningTempMinutes)
	le.PutUint32(b[196:], l.criticalTempMinutes)
	for i, k := range l.sensorKelvin {
		le.PutUint16(b[200+2*i:], k)
	}
	return b
}

func FuzzParseSMARTLog(f *testing.F) {
	for _, name := range []string{"smart-healthy.hex", "smart-worn-hot.hex", "smart-u128.hex"} {
		f.Add(readSMARTFixture(f, name))
	}
	f.Add(make([]byte, 100))
	healthy, worn := readSMARTFixture(f, "smart-healthy.hex"), readSMARTFixture(f, "smart-worn-hot.hex")
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSMARTJunk(t, map[string][]byte{"nvme0": healthy, "nvme1": b, "nvme2": worn})
		l, err := parseSMARTLog(b)
		if len(b) != smartLogSize {
			if err == nil {
				t.Fatalf("accepted a %d-byte page", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []float64{l.dataUnitsRead, l.dataUnitsWritten, l.hostReadCommands, l.mediaErrors, l.errorLogEntries} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("counter decoded as %v", v)
			}
		}
		// Re-encoding a page whose counters fit in 53 bits (exact in
		// float64) and whose reserved bytes are zero gives it back.
		fits := true
		for _, off := range []int{32, 48, 64, 80, 96, 112, 128, 144, 160, 176} {
			if binary.LittleEndian.Uint64(b[off+8:]) != 0 || binary.LittleEndian.Uint64(b[off:]) >= 1<<53 {
				fits = false
			}
		}
		reserved := b[6:32]
		for _, r := range [][]byte{reserved, b[216:]} {
			for _, x := range r {
				if x != 0 {
					fits = false
				}
			}
		}
		if fits {
			if got := encodeSMARTLog(l); string(got) != string(b) {
				t.Fatalf("round trip changed the page:\n got %x\nwant %x", got, b)
			}
		}
	})
}

// A controller whose SMART read blocks (here: open of a FIFO without a
// writer, standing in for a fabrics controller whose target vanished) costs
// a scrape at most the SMART timeout, and the next scrape does not queue a
// second read behind the blocked one.
func TestNVMeBlockedSMARTRead(t *testing.T) {
	devDir := t.TempDir()
	fifo := filepath.Join(devDir, "nvme0")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Unblock the reader at the end, whatever happened.
	t.Cleanup(func() {
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	logs := &logBuffer{}
	const timeout = 300 * time.Millisecond
	c, err := newNVMeCollector(filepath.Join("fixtures", "sys"), devDir, timeout, logs)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if _, err := collectAll(c); err != nil {
		t.Fatal(err)
	}
	if elapsed, limit := time.Since(start), timeout+500*time.Millisecond+3*time.Second; elapsed > limit {
		t.Errorf("scrape with a blocked controller took %s, want under %s", elapsed, limit)
	}
	if logs.count("did not return within") != 1 {
		t.Errorf("blocked read not reported: %q", logs.lines)
	}

	start = time.Now()
	if _, err := collectAll(c); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed >= timeout {
		t.Errorf("second scrape took %s; with the read still blocked it should not wait again", elapsed)
	}
	if logs.count("has not returned yet") != 1 {
		t.Errorf("second scrape did not report the read still in flight: %q", logs.lines)
	}

	// Releasing the FIFO lets the blocked read finish (the ioctl then
	// fails on a FIFO); afterwards the controller is tried again.
	fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	probetest.WaitUntil(t, "the blocked SMART read to return", 10*time.Second, func() bool {
		return !c.smartReads.inFlight("nvme0")
	})
}

// The collector reads the controllers' attributes itself; it must read what
// procfs's sysfs.NVMeClass reads from the same tree.
func TestReadNVMeControllersMatchesProcfs(t *testing.T) {
	sysRoot := filepath.Join("fixtures", "sys")
	want := procfsClass(t, sysRoot, sysfs.FS.NVMeClass)
	got, err := readNVMeControllers(filepath.Join(sysRoot, "class", "nvme"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("read %d controllers, procfs %d", len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("controller %s missing", name)
			continue
		}
		if g.model != w.Model || g.serial != w.Serial || g.firmwareRevision != w.FirmwareRevision || g.state != w.State {
			t.Errorf("controller %s: read %+v, procfs %+v", name, g, w)
		}
		transport, err := os.ReadFile(filepath.Join(w.Path, "transport"))
		if err != nil {
			t.Fatal(err)
		}
		if g.transport != strings.TrimSpace(string(transport)) {
			t.Errorf("controller %s: transport %q, file has %q", name, g.transport, transport)
		}
	}
}

// A controller whose attributes cannot be read (one being removed, an odd
// driver) is left out with an error naming it; the others are exported. A
// missing transport file (kernels before 4.15) is not an error.
func TestNVMeUnreadableController(t *testing.T) {
	sysRoot := t.TempDir()
	write := func(ctrl, attr, value string) {
		t.Helper()
		dir := filepath.Join(sysRoot, "class", "nvme", ctrl)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, attr), []byte(value+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	for _, attr := range []string{"model", "serial", "firmware_rev", "state"} {
		write("nvme0", attr, "x-"+attr)
		if attr != "serial" {
			write("nvme1", attr, "y-"+attr)
		}
	}
	c, err := newNVMeCollector(sysRoot, t.TempDir(), time.Second, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	reg := newTestRegistry("nvme", c, nil)
	want := `
# HELP plateau_nvme_info NVMe controller of this node; the value is always 1.
# TYPE plateau_nvme_info gauge
plateau_nvme_info{device="nvme0",firmware_revision="x-firmware_rev",model="x-model",serial="x-serial",state="x-state",transport=""} 1
` + scrapeSuccessHelp + `
plateau_scrape_collector_success{collector="nvme"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_nvme_info", "plateau_scrape_collector_success"); err != nil {
		t.Error(err)
	}
	if _, err := collectAll(c); err == nil || !strings.Contains(err.Error(), "nvme1") || !strings.Contains(err.Error(), "serial") {
		t.Errorf("Update error = %v, want one naming nvme1 and its serial", err)
	}
}

// checkSMARTJunk is the "junk among good rows" property for SMART logs,
// where a row is a controller's log page: the fixture controllers answer
// with pages, and every page that decodes gives its controller's SMART
// metrics while each one that does not is counted and costs its own
// controller only.
func checkSMARTJunk(t *testing.T, pages map[string][]byte) {
	t.Helper()
	c, err := newNVMeCollector(filepath.Join("fixtures", "sys"), t.TempDir(), 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.readSMART = func(name string, _ time.Duration) ([]byte, error) {
		if p, ok := pages[name]; ok {
			return p, nil
		}
		return nil, unix.ENOENT
	}
	ms, err := collectAll(c)
	if err != nil {
		t.Fatal(err)
	}
	wantBad := uint64(0)
	for _, p := range pages {
		if len(p) != smartLogSize {
			wantBad++
		}
	}
	if n, ok := parseErrorCount(c, nvmeSourceSMART); !ok || n != wantBad {
		t.Errorf("SMART parse errors = %d (present %v), want %d", n, ok, wantBad)
	}
	for _, m := range ms {
		if m.Desc() != c.smartAvailable.desc {
			continue
		}
		dev := label(t, m, "device")
		want := 0.0
		if p, ok := pages[dev]; ok && len(p) == smartLogSize {
			want = 1
		}
		if got := metricValue(t, m); got != want {
			t.Errorf("plateau_nvme_smart_available{device=%q} = %v, want %v", dev, got, want)
		}
	}
}

// A short SMART page costs its controller only, and is counted.
func TestNVMeUndecodableSMARTPage(t *testing.T) {
	checkSMARTJunk(t, map[string][]byte{
		"nvme0": readSMARTFixture(t, "smart-healthy.hex"),
		"nvme1": make([]byte, 100),
		"nvme2": readSMARTFixture(t, "smart-worn-hot.hex"),
	})
}
