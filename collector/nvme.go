package collector

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

const nvmeSubsystem = "nvme"

var (
	nvmeDevDir = kingpin.Flag("collector.nvme.dev-dir",
		"Directory holding the NVMe controller character devices (nvme0, ...) whose SMART log is read.").
		Default("/dev").String()
	nvmeSMARTTimeout = kingpin.Flag("collector.nvme.smart-timeout",
		"Deadline for reading one controller's SMART log; a controller that does not answer is reported unavailable.").
		Default("2s").Duration()
	// nvmeSMARTHelperFD is set by the daemon itself when it re-executes
	// without capabilities (see nvme_helper.go); never by a user.
	nvmeSMARTHelperFD = kingpin.Flag("collector.nvme.smart-helper-fd",
		"Control socket of the SMART keeper started before the daemon dropped its capabilities (set by the daemon).").
		Hidden().Default("-1").Int()
)

func init() {
	registerCollector(nvmeSubsystem, true, func(logger log.Logger) (Collector, error) {
		c, err := newNVMeCollector(sysFilePath(), *nvmeDevDir, *nvmeSMARTTimeout, logger)
		if err != nil || *nvmeSMARTHelperFD < 0 {
			return c, err
		}
		h, err := newSMARTHelperClient(*nvmeSMARTHelperFD, logger)
		if err != nil {
			return nil, fmt.Errorf("SMART helper: %w", err)
		}
		c.readSMART = h.read
		c.helperRunning = func() bool { return h.running() != 0 }
		return c, nil
	})
}

type nvmeCollector struct {
	classDir     string
	devDir       string
	smartTimeout time.Duration
	logger       log.Logger
	// readSMART reads a controller's SMART log: in this process (which
	// needs CAP_SYS_ADMIN), or through the SMART helper.
	readSMART func(name string, timeout time.Duration) ([]byte, error)
	// helperRunning says whether a SMART helper server runs; nil when
	// the daemon reads SMART logs itself.
	helperRunning func() bool

	// smartReads are the SMART reads by controller: one whose read from
	// an earlier scrape has not returned is not asked again until it does.
	smartReads stuckCalls[smartResult]

	mu sync.Mutex
	// lastProblem is the last SMART problem logged per controller, so each
	// problem is logged once rather than on every scrape.
	lastProblem map[string]string
	// parseErrs counts the SMART log pages that could not be decoded.
	parseErrs *parseErrorCounter

	info, smartAvailable typedDesc
	smartHelperUp        typedDesc
	criticalWarning      typedDesc
	temperature          typedDesc
	sensorTemperature    typedDesc
	availableSpare       typedDesc
	spareThreshold       typedDesc
	percentageUsed       typedDesc
	dataRead, dataWrite  typedDesc
	hostReads            typedDesc
	hostWrites           typedDesc
	busy                 typedDesc
	powerCycles          typedDesc
	powerOn              typedDesc
	unsafeShutdowns      typedDesc
	mediaErrors          typedDesc
	errorLogEntries      typedDesc
	warningTempTime      typedDesc
	criticalTempTime     typedDesc
}

func newNVMeCollector(sysRoot, devDir string, smartTimeout time.Duration, logger log.Logger) (*nvmeCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if smartTimeout <= 0 {
		return nil, fmt.Errorf("NVMe SMART timeout must be positive, got %s", smartTimeout)
	}
	desc := descsOf(nvmeSubsystem).typed
	dev := []string{"device"}
	gauge := func(n, help string, labels ...string) typedDesc {
		return desc(n, help, prometheus.GaugeValue, append(dev, labels...)...)
	}
	counter := func(n, help string) typedDesc { return desc(n, help, prometheus.CounterValue, dev...) }
	c := &nvmeCollector{
		classDir:     filepath.Join(sysRoot, "class", "nvme"),
		devDir:       devDir,
		smartTimeout: smartTimeout,
		logger:       logger,
		lastProblem:  map[string]string{},
		parseErrs:    newParseErrorCounter(logger),

		info: gauge("info", "NVMe controller of this node; the value is always 1.",
			"model", "serial", "firmware_revision", "state", "transport"),
		// 0 while the helper (the process that alone holds CAP_SYS_ADMIN) is
		// being restarted or cannot be any more (its keeper exited: restart
		// the service); absent when the daemon reads SMART logs itself.
		smartHelperUp: desc("smart_helper_up",
			"1 while the SMART helper process runs, else 0.", prometheus.GaugeValue),
		// 1 if the controller's SMART / Health log was read in this
		// scrape, 0 if not (no CAP_SYS_ADMIN, no device node, controller
		// not live or not answering).
		smartAvailable: gauge("smart_available", "1 if the controller's SMART / Health log was read in this scrape, else 0."),

		// SMART critical warning bits: 1 spare below threshold, 2
		// temperature, 4 reliability degraded, 8 read-only, 16 volatile
		// backup failed, 32 persistent memory read-only; 0 is healthy.
		criticalWarning:   gauge("critical_warning", "SMART critical warning bits of the controller; 0 is healthy."),
		temperature:       gauge("temperature_celsius", "Composite temperature of the controller, in degrees Celsius."),
		sensorTemperature: gauge("temperature_sensor_celsius", "Temperature reported by an implemented temperature sensor, in degrees Celsius.", "sensor"),
		availableSpare:    gauge("available_spare_ratio", "Remaining spare capacity, 0 to 1."),
		spareThreshold:    gauge("available_spare_threshold_ratio", "Spare capacity below which the controller raises a critical warning, 0 to 1."),
		percentageUsed:    gauge("percentage_used_ratio", "Share of the rated endurance used, vendor estimate; 1 is the rated life and values above 1 happen."),
		dataRead:          counter("data_read_bytes_total", "Bytes read by the host, counted by the controller in units of 512000 bytes."),
		dataWrite:         counter("data_written_bytes_total", "Bytes written by the host, counted by the controller in units of 512000 bytes."),
		hostReads:         counter("host_read_commands_total", "Read commands completed by the controller."),
		hostWrites:        counter("host_write_commands_total", "Write commands completed by the controller."),
		busy:              counter("controller_busy_seconds_total", "Time the controller was busy with I/O commands, counted in minutes."),
		powerCycles:       counter("power_cycles_total", "Power cycles of the controller."),
		powerOn:           counter("power_on_seconds_total", "Time the controller was powered on, counted in hours."),
		unsafeShutdowns:   counter("unsafe_shutdowns_total", "Shutdowns without a prior shutdown notification."),
		mediaErrors:       counter("media_errors_total", "Unrecovered data integrity errors detected by the controller."),
		errorLogEntries:   counter("error_log_entries_total", "Error information log entries over the life of the controller."),
		warningTempTime:   counter("warning_temperature_seconds_total", "Time the composite temperature was above the warning threshold, counted in minutes."),
		criticalTempTime:  counter("critical_temperature_seconds_total", "Time the composite temperature was above the critical threshold, counted in minutes."),
	}
	c.readSMART = func(name string, timeout time.Duration) ([]byte, error) {
		return readSMARTLog(filepath.Join(devDir, name), timeout)
	}
	return c, nil
}

// smartResult is the outcome of one controller's SMART read.
type smartResult struct {
	log smartLog
	err error
	// read is true when a log page came back, whether or not it decoded;
	// undecodable is true when it did not.
	read, undecodable bool
}

// nvmeSourceSMART is the source of the collector's parse errors: the SMART
// / Health log pages, one "line" per controller and scrape.
const nvmeSourceSMART = "smart_log"

func (c *nvmeCollector) parseErrors() *parseErrorCounter { return c.parseErrs }

// presence lists the sysfs class: absent or empty, there is no controller.
func (c *nvmeCollector) presence() (bool, string) {
	if !dirHasEntries(c.classDir) {
		return false, "no NVMe controller on this node (nothing in " + c.classDir + ")"
	}
	return true, ""
}

func (c *nvmeCollector) Update(ch chan<- prometheus.Metric) error {
	if c.helperRunning != nil {
		up := 0.0
		if c.helperRunning() {
			up = 1
		}
		ch <- c.smartHelperUp.mustNewConstMetric(up)
	}
	if _, err := os.Stat(c.classDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", c.classDir, ErrNoData)
	}
	class, readErr := readNVMeControllers(c.classDir)
	if len(class) == 0 {
		if readErr != nil {
			return fmt.Errorf("reading NVMe controllers: %w", readErr)
		}
		return fmt.Errorf("no NVMe controllers in %s: %w", c.classDir, ErrNoData)
	}
	names := make([]string, 0, len(class))
	for n := range class {
		names = append(names, n)
	}
	sort.Strings(names)

	// SMART reads run concurrently under one deadline: a fabrics
	// controller whose target is gone can hold an admin command for the
	// kernel's whole admin timeout.
	results := make(map[string]<-chan smartResult, len(names))
	for _, n := range names {
		dev := class[n]
		if dev.state != "live" {
			results[n] = settled(smartResult{err: fmt.Errorf("controller state is %q", dev.state)})
			continue
		}
		results[n] = c.startSMARTRead(n)
	}
	deadline := time.NewTimer(c.smartTimeout + 500*time.Millisecond)
	defer deadline.Stop()

	// A page that does not decode costs that controller's SMART metrics
	// only (smart_available 0), as any other SMART problem does.
	var bad badLines
	pagesRead := false
	for _, n := range names {
		dev := class[n]
		dn := labelValue(n)
		ch <- c.info.mustNewConstMetric(1, dn, labelValue(dev.model), labelValue(dev.serial),
			labelValue(dev.firmwareRevision), labelValue(dev.state), labelValue(dev.transport))

		var res smartResult
		select {
		case res = <-results[n]:
		case <-deadline.C:
			// Every later controller gets the expired timer's verdict
			// too, unless its result is already there.
			deadline.Reset(0)
			select {
			case res = <-results[n]:
			default:
				res.err = fmt.Errorf("SMART log read did not return within %s", c.smartTimeout)
			}
		}
		pagesRead = pagesRead || res.read
		if res.undecodable {
			bad.add(0, "SMART log of "+n, res.err.Error())
		}
		if res.err != nil {
			c.noteProblem(n, res.err)
			ch <- c.smartAvailable.mustNewConstMetric(0, dn)
			continue
		}
		c.clearProblem(n)
		ch <- c.smartAvailable.mustNewConstMetric(1, dn)
		c.smartMetrics(ch, dn, res.log)
	}
	if pagesRead {
		c.parseErrs.record(nvmeSourceSMART, bad)
	}
	return readErr
}

// settled returns a channel that already holds r.
func settled(r smartResult) chan smartResult {
	ch := make(chan smartResult, 1)
	ch <- r
	return ch
}

// startSMARTRead reads a controller's SMART log in the background, unless a
// read started by an earlier scrape is still blocked in the kernel.
func (c *nvmeCollector) startSMARTRead(name string) <-chan smartResult {
	ch, err := c.smartReads.start(name, nil, func() smartResult {
		b, err := c.readSMART(name, c.smartTimeout)
		if err != nil {
			return smartResult{err: err}
		}
		l, err := parseSMARTLog(b)
		return smartResult{log: l, err: err, read: true, undecodable: err != nil}
	})
	if err != nil {
		return settled(smartResult{err: errors.New("SMART log read from an earlier scrape has not returned yet")})
	}
	return ch
}

// noteProblem logs a SMART problem the first time it is seen for a
// controller; without CAP_SYS_ADMIN it would otherwise be logged on every
// scrape for every controller.
func (c *nvmeCollector) noteProblem(name string, err error) {
	msg := err.Error()
	c.mu.Lock()
	logged := c.lastProblem[name] == msg
	c.lastProblem[name] = msg
	c.mu.Unlock()
	if logged {
		return
	}
	kv := []interface{}{"msg", "NVMe SMART log unavailable; plateau_nvme_smart_available is 0 until it is readable",
		"device", name, "err", err}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		kv = append(kv, "hint", "reading the SMART log needs CAP_SYS_ADMIN and access to the device node")
	}
	level.Warn(c.logger).Log(kv...)
}

func (c *nvmeCollector) clearProblem(name string) {
	c.mu.Lock()
	delete(c.lastProblem, name)
	c.mu.Unlock()
}

func (c *nvmeCollector) smartMetrics(ch chan<- prometheus.Metric, dev string, l smartLog) {
	for i, k := range l.sensorKelvin {
		if k != 0 {
			ch <- c.sensorTemperature.mustNewConstMetric(kelvinToCelsius(k), dev, strconv.Itoa(i+1))
		}
	}
	// Every other SMART descriptor has only the device label.
	d := newLabelPairs(c.criticalWarning.desc, dev)
	ch <- d.metric(&c.criticalWarning, float64(l.criticalWarning))
	ch <- d.metric(&c.temperature, kelvinToCelsius(l.temperatureKelvin))
	ch <- d.metric(&c.availableSpare, float64(l.availableSpare)/100)
	ch <- d.metric(&c.spareThreshold, float64(l.availableSpareThreshold)/100)
	ch <- d.metric(&c.percentageUsed, float64(l.percentageUsed)/100)
	ch <- d.metric(&c.dataRead, l.dataUnitsRead*dataUnitBytes)
	ch <- d.metric(&c.dataWrite, l.dataUnitsWritten*dataUnitBytes)
	ch <- d.metric(&c.hostReads, l.hostReadCommands)
	ch <- d.metric(&c.hostWrites, l.hostWriteCommands)
	ch <- d.metric(&c.busy, l.controllerBusyMinutes*60)
	ch <- d.metric(&c.powerCycles, l.powerCycles)
	ch <- d.metric(&c.powerOn, l.powerOnHours*3600)
	ch <- d.metric(&c.unsafeShutdowns, l.unsafeShutdowns)
	ch <- d.metric(&c.mediaErrors, l.mediaErrors)
	ch <- d.metric(&c.errorLogEntries, l.errorLogEntries)
	ch <- d.metric(&c.warningTempTime, float64(l.warningTempMinutes)*60)
	ch <- d.metric(&c.criticalTempTime, float64(l.criticalTempMinutes)*60)
}

// nvmePassthruCmd is struct nvme_passthru_cmd (alias nvme_admin_cmd) of
// include/uapi/linux/nvme_ioctl.h: 72 bytes, no padding.
type nvmePassthruCmd struct {
	opcode      uint8
	flags       uint8
	rsvd1       uint16
	nsid        uint32
	cdw2        uint32
	cdw3        uint32
	metadata    uint64
	addr        uint64
	metadataLen uint32
	dataLen     uint32
	cdw10       uint32
	cdw11       uint32
	cdw12       uint32
	cdw13       uint32
	cdw14       uint32
	cdw15       uint32
	timeoutMS   uint32
	result      uint32
}

const (
	// nvmeIoctlAdminCmd is _IOWR('N', 0x41, struct nvme_admin_cmd).
	nvmeIoctlAdminCmd = 0xC0484E41
	// nvmeAdminGetLogPage is the Get Log Page admin opcode.
	nvmeAdminGetLogPage = 0x02
	// nvmeLogSMART is the SMART / Health Information log identifier.
	nvmeLogSMART = 0x02
	// nvmeNSIDAll asks for the controller-wide log rather than one
	// namespace's.
	nvmeNSIDAll = 0xFFFFFFFF
)

// smartGetLogCmd builds the Get Log Page command for the SMART log into
// buf. CDW10 holds the log identifier in bits 7:0 and the number of dwords
// to transfer, minus one, in bits 27:16: 0x007F0002 for 512 bytes.
func smartGetLogCmd(buf []byte, timeout time.Duration) nvmePassthruCmd {
	return nvmePassthruCmd{
		opcode:    nvmeAdminGetLogPage,
		nsid:      nvmeNSIDAll,
		addr:      uint64(uintptr(unsafe.Pointer(&buf[0]))),
		dataLen:   uint32(len(buf)),
		cdw10:     uint32(len(buf)/4-1)<<16 | nvmeLogSMART,
		timeoutMS: uint32(timeout / time.Millisecond),
	}
}

// readSMARTLog reads the SMART / Health Information log of the controller
// character device at path with the NVMe admin passthrough ioctl. It needs
// CAP_SYS_ADMIN. The kernel aborts the command after timeout.
func readSMARTLog(path string, timeout time.Duration) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	return smartLogIoctl(fd, path, timeout)
}

// nvmeController is what the collector reads of a controller in sysfs.
type nvmeController struct {
	model, serial, firmwareRevision, state, transport string
}

// nvmeControllerAttrs are read for every controller; transport is optional
// (kernels before 4.15 lack it). The order is nvmeController's.
var nvmeControllerAttrs = [...]string{"model", "serial", "firmware_rev", "state", "transport"}

// readNVMeControllers reads the controllers under classDir
// (/sys/class/nvme). It reads these five attributes itself rather than
// through procfs's sysfs.NVMeClass, which also lists and reads every
// namespace (twice the file operations, none of them exported here) and
// fails every controller when one lacks a file. A sysfs open costs 10-25 µs
// in the kernel; with 24 controllers that was most of an NVMe scrape.
// A controller whose attributes cannot be read is left out and named in
// the returned error; the others are returned.
func readNVMeControllers(classDir string) (map[string]nvmeController, error) {
	entries, err := os.ReadDir(classDir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	ctrls := make([]nvmeController, len(names))
	errs := make([]error, len(names))
	// Controllers are read in parallel, a few at a time: the cost is in
	// the kernel, per file.
	workers := min(runtime.GOMAXPROCS(0), len(names))
	next := make(chan int, len(names))
	for i := range names {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf [4096]byte // a sysfs attribute is at most a page
			for i := range next {
				ctrls[i], errs[i] = readNVMeController(filepath.Join(classDir, names[i]), buf[:])
			}
		}()
	}
	wg.Wait()

	out := make(map[string]nvmeController, len(names))
	var failed []error
	for i, n := range names {
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("NVMe controller %s: %w", n, errs[i]))
			continue
		}
		out[n] = ctrls[i]
	}
	return out, errors.Join(failed...)
}

func readNVMeController(dir string, buf []byte) (nvmeController, error) {
	var c nvmeController
	dfd, err := openSysfsDir(dir)
	if err != nil {
		return c, err
	}
	defer unix.Close(dfd)
	fields := [...]*string{&c.model, &c.serial, &c.firmwareRevision, &c.state, &c.transport}
	for i, attr := range nvmeControllerAttrs {
		v, err := readSysfsAttr(dfd, attr, buf)
		if err != nil {
			if attr == "transport" && errors.Is(err, unix.ENOENT) {
				continue
			}
			return c, &fs.PathError{Op: "read", Path: filepath.Join(dir, attr), Err: err}
		}
		*fields[i] = v
	}
	return c, nil
}
