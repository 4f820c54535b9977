package collector

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

const infinibandSubsystem = "infiniband"

func init() {
	registerCollector(infinibandSubsystem, true, func(logger log.Logger) (Collector, error) {
		return newInfiniBandCollector(sysFilePath(), logger)
	})
}

// ibCounter describes one per-port counter read from sysfs.
type ibCounter struct {
	desc typedDesc
	// name is the file in the port's counters/ directory, and the label
	// of the saturation metric.
	name string
	// legacy is the 64-bit file in counters_ext/ that kernels before 4.5
	// expose next to the 32-bit field; "" when there is none.
	legacy string
	// width is the width in bits of the InfiniBand PMA field behind name;
	// 0 means a 64-bit field that cannot saturate in practice.
	width uint
	// unit multiplies the file's value: the data counters count 4-byte
	// words (procfs multiplies them by 4 as well).
	unit uint64
}

// saturated reports whether v, read from name (not from legacy), sits at
// the maximum of its field. InfiniBand PMA counters stop at their maximum
// instead of wrapping, so a rate computed from a saturated counter reads
// zero although traffic or errors continue.
func (c *ibCounter) saturated(v uint64) bool {
	if c.width == 0 || c.width >= 64 {
		return false
	}
	return v == c.unit*(uint64(1)<<c.width-1)
}

type infinibandCollector struct {
	classDir string
	logger   log.Logger

	counters []ibCounter

	info, rate, state, physState, saturatedDesc typedDesc
	// portPairs and saturatedPairs keep label pairs between scrapes.
	portPairs, saturatedPairs *labelPairsCache
	// parseErrs counts the attribute files whose values could not be read.
	parseErrs *parseErrorCounter
}

// The sources of the collector's parse errors: a port's state, phys_state
// and rate files (and its directory's name), and its counter files.
const (
	ibSourcePorts    = "sysfs_ports"
	ibSourceCounters = "sysfs_counters"
)

func (c *infinibandCollector) parseErrors() *parseErrorCounter { return c.parseErrs }

func newInfiniBandCollector(sysRoot string, logger log.Logger) (*infinibandCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	c := &infinibandCollector{
		classDir:  filepath.Join(sysRoot, "class", "infiniband"),
		logger:    logger,
		parseErrs: newParseErrorCounter(logger),
	}
	portLabels := []string{"device", "port"}
	desc := descsOf(infinibandSubsystem).typed
	gauge := func(n, help string, labels []string) typedDesc {
		return desc(n, help, prometheus.GaugeValue, labels...)
	}
	c.info = gauge("info", "InfiniBand HCA of this node; the value is always 1.",
		[]string{"device", "board_id", "firmware_version", "hca_type"})
	c.rate = gauge("port_rate_bytes_per_second", "Signalling rate the port trained to, in bytes per second; a drop means the link trained down.", portLabels)
	c.state = gauge("port_state_id", "Logical state of the port: 1 down, 2 init, 3 armed, 4 active, 5 active defer.", portLabels)
	c.physState = gauge("port_physical_state_id", "Physical state of the port: 2 polling, 3 disabled, 4 port configuration training, 5 link up, 6 link error recovery, 7 phy test.", portLabels)
	// 1 if a port counter of 32 bits or fewer sits at its maximum: the
	// hardware stopped counting and its rate reads 0; reset it with
	// perfquery -x -R. 0 otherwise.
	c.saturatedDesc = gauge("port_counter_saturated",
		"1 if the port counter (32 bits or fewer) stopped at its maximum, else 0.",
		[]string{"device", "port", "counter"})

	counter := func(metric, help, file string, width uint) ibCounter {
		return ibCounter{
			desc:  desc(metric, help, prometheus.CounterValue, portLabels...),
			name:  file,
			width: width,
			unit:  1,
		}
	}
	// extended prefers the 64-bit counters_ext value of kernels before 4.5
	// to the 32-bit field; newer kernels put the 64-bit value in counters/
	// when the HCA supports it, and nothing tells the two apart, so a value
	// at the 32-bit maximum is flagged either way. baseWidth is 0 for the
	// unicast and multicast counters, which only exist as 64-bit
	// PortCountersExtended fields.
	extended := func(metric, help, file, legacy string, unit uint64, baseWidth uint) ibCounter {
		return ibCounter{
			desc:   desc(metric, help, prometheus.CounterValue, portLabels...),
			name:   file,
			legacy: legacy,
			width:  baseWidth,
			unit:   unit,
		}
	}
	// Widths are those of the PortCounters attribute in the InfiniBand
	// Architecture Specification, vol. 1, table "PortCounters", which is
	// what the kernel's sysfs counters decode (drivers/infiniband/core/sysfs.c).
	c.counters = []ibCounter{
		extended("port_data_received_bytes_total", "Data bytes received on the port, all virtual lanes.", "port_rcv_data", "port_rcv_data_64", 4, 32),
		extended("port_data_transmitted_bytes_total", "Data bytes transmitted on the port, all virtual lanes.", "port_xmit_data", "port_xmit_data_64", 4, 32),
		extended("port_packets_received_total", "Packets received on the port.", "port_rcv_packets", "port_rcv_packets_64", 1, 32),
		extended("port_packets_transmitted_total", "Packets transmitted on the port.", "port_xmit_packets", "port_xmit_packets_64", 1, 32),
		extended("port_unicast_packets_received_total", "Unicast packets received on the port.", "unicast_rcv_packets", "port_unicast_rcv_packets", 1, 0),
		extended("port_unicast_packets_transmitted_total", "Unicast packets transmitted on the port.", "unicast_xmit_packets", "port_unicast_xmit_packets", 1, 0),
		extended("port_multicast_packets_received_total", "Multicast packets received on the port.", "multicast_rcv_packets", "port_multicast_rcv_packets", 1, 0),
		extended("port_multicast_packets_transmitted_total", "Multicast packets transmitted on the port.", "multicast_xmit_packets", "port_multicast_xmit_packets", 1, 0),
		counter("port_transmit_wait_total", "Ticks during which the port had data to send but no flow-control credits: congestion downstream.", "port_xmit_wait", 32),
		counter("port_symbol_errors_total", "Minor link errors detected on physical lanes; a steady rise points at a bad cable or transceiver.", "symbol_error", 16),
		counter("port_link_error_recovery_total", "Times the link error recovery process completed successfully.", "link_error_recovery", 8),
		counter("port_link_downed_total", "Times the link error recovery process failed and the link went down.", "link_downed", 8),
		counter("port_errors_received_total", "Packets received with an error.", "port_rcv_errors", 16),
		counter("port_receive_remote_physical_errors_total", "Packets received marked with the EBP delimiter (bad upstream).", "port_rcv_remote_physical_errors", 16),
		counter("port_receive_switch_relay_errors_total", "Packets received that could not be forwarded by the switch.", "port_rcv_switch_relay_errors", 16),
		counter("port_receive_constraint_errors_total", "Packets received that were dropped by partition or raw-packet filtering.", "port_rcv_constraint_errors", 8),
		counter("port_transmit_constraint_errors_total", "Packets not transmitted because of partition or raw-packet filtering.", "port_xmit_constraint_errors", 8),
		counter("port_discards_transmitted_total", "Outbound packets discarded because the port was down or congested.", "port_xmit_discards", 16),
		counter("port_discards_received_total", "Inbound packets discarded by the port (only some drivers report it).", "port_rcv_discards", 0),
		counter("port_local_link_integrity_errors_total", "Times the count of local physical errors exceeded its threshold.", "local_link_integrity_errors", 4),
		counter("port_excessive_buffer_overrun_errors_total", "Times consecutive receive buffer overruns exceeded their threshold.", "excessive_buffer_overrun_errors", 4),
		counter("port_vl15_dropped_total", "Subnet management packets (VL15) dropped for lack of buffers.", "VL15_dropped", 16),
	}
	c.portPairs = newLabelPairsCache(c.rate.desc)
	c.saturatedPairs = newLabelPairsCache(c.saturatedDesc.desc)
	return c, nil
}

// Update reads the HCAs concurrently: on real hardware every counter file
// read is a management datagram to the HCA firmware, and one HCA that fails
// to read does not hide the others.
//
// presence lists the sysfs class: absent or empty, there is no HCA.
func (c *infinibandCollector) presence() (bool, string) {
	if !dirHasEntries(c.classDir) {
		return false, "no InfiniBand HCA on this node (nothing in " + c.classDir + ")"
	}
	return true, ""
}

// The collector reads the attribute and counter files it exports itself
// instead of through procfs's sysfs.InfiniBandDevice, which also reads
// every hw_counters file of every port (dozens per port on mlx5, each read
// a firmware query for data this collector does not export) and fails the
// whole HCA on one unreadable port.
func (c *infinibandCollector) Update(ch chan<- prometheus.Metric) error {
	entries, err := os.ReadDir(c.classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", c.classDir, ErrNoData)
	}
	if err != nil {
		return fmt.Errorf("listing InfiniBand devices: %w", err)
	}
	if len(entries) == 0 {
		return fmt.Errorf("no InfiniBand devices in %s: %w", c.classDir, ErrNoData)
	}
	devs := make([]ibDevice, len(entries))
	var wg sync.WaitGroup
	for i, e := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			devs[i] = c.readDevice(e.Name())
		}()
	}
	wg.Wait()

	var errs []error
	var badPorts, badCounters badLines
	ports := 0
	for i := range devs {
		dev := &devs[i]
		errs = append(errs, dev.errs...)
		badPorts.merge(dev.badPorts)
		badCounters.merge(dev.badCounters)
		ports += len(dev.ports)
	}
	c.parseErrs.record(ibSourcePorts, badPorts)
	c.parseErrs.record(ibSourceCounters, badCounters)
	if ports == 0 && badPorts.count > 0 {
		// Every port was unreadable: reporting HCAs without ports
		// would look like HCAs whose cables were pulled.
		errs = append(errs, fmt.Errorf("no InfiniBand port could be read, %d skipped (first %s)", badPorts.count, badPorts.first))
	}
	for i := range devs {
		dev := &devs[i]
		if !dev.ok {
			continue
		}
		name := labelValue(dev.name)
		ch <- c.info.mustNewConstMetric(1, name, labelValue(dev.boardID), labelValue(dev.firmwareVersion), labelValue(dev.hcaType))
		for j := range dev.ports {
			c.updatePort(ch, name, &dev.ports[j])
		}
	}
	c.portPairs.sweep()
	c.saturatedPairs.sweep()
	return errors.Join(errs...)
}

// ibDevice is what the collector read of one HCA.
type ibDevice struct {
	name                              string
	boardID, firmwareVersion, hcaType string
	ports                             []ibPort
	// ok is false when the HCA itself could not be read; errs lists that
	// and every port or counter that could not be read. badPorts and
	// badCounters are the files that were read but held no usable value.
	ok                    bool
	errs                  []error
	badPorts, badCounters badLines
}

// ibValue is one counter of a port: absent when the driver lacks it; legacy
// when it came from counters_ext.
type ibValue struct {
	value           uint64
	present, legacy bool
}

type ibPort struct {
	number               uint64
	rate                 uint64 // bytes per second
	stateID, physStateID uint64
	counters             []ibValue // per c.counters
}

// readDevice reads an HCA: fw_ver is required (every driver has it since
// 4.10), board_id and hca_type are not.
func (c *infinibandCollector) readDevice(name string) ibDevice {
	dev := ibDevice{name: name}
	dir := filepath.Join(c.classDir, name)
	dfd, err := openSysfsDir(dir)
	if err != nil {
		dev.errs = append(dev.errs, fmt.Errorf("InfiniBand device %s: %w", name, err))
		return dev
	}
	defer unix.Close(dfd)
	var buf [4096]byte
	if dev.firmwareVersion, err = readSysfsAttr(dfd, "fw_ver", buf[:]); err != nil {
		dev.errs = append(dev.errs, fmt.Errorf("InfiniBand device %s: reading fw_ver: %w", name, err))
		return dev
	}
	dev.boardID, _ = readSysfsAttr(dfd, "board_id", buf[:])
	dev.hcaType, _ = readSysfsAttr(dfd, "hca_type", buf[:])

	portsDir := filepath.Join(dir, "ports")
	ports, err := os.ReadDir(portsDir)
	if err != nil {
		dev.errs = append(dev.errs, fmt.Errorf("InfiniBand device %s: listing ports: %w", name, err))
		return dev
	}
	dev.ok = true
	for _, p := range ports {
		port, ok, err := c.readPort(filepath.Join(portsDir, p.Name()), p.Name(), buf[:], &dev)
		if err != nil {
			dev.errs = append(dev.errs, fmt.Errorf("InfiniBand device %s port %s: %w", name, p.Name(), err))
		}
		if ok {
			dev.ports = append(dev.ports, port)
		}
	}
	sort.Slice(dev.ports, func(i, j int) bool { return dev.ports[i].number < dev.ports[j].number })
	return dev
}

// readPort reads a port's state, rate and counters. ok is false when the
// port's state or rate could not be read or parsed; a counter that could
// not be read is only named in err. A port directory whose name is not a
// number, a state or rate file that does not parse, and a counter file
// that holds no number are counted in dev's bad lines instead. A counter
// the driver does not implement is absent, neither an error nor a bad
// line: its file is missing, unreadable (EINVAL, EOPNOTSUPP) or reads
// "N/A (no PMA)".
func (c *infinibandCollector) readPort(dir, name string, buf []byte, dev *ibDevice) (p ibPort, ok bool, err error) {
	if p.number, err = strconv.ParseUint(name, 10, 32); err != nil {
		dev.badPorts.add(0, "port directory name is not a number", dir)
		return p, false, nil
	}
	pfd, err := openSysfsDir(dir)
	if err != nil {
		return p, false, err
	}
	defer unix.Close(pfd)
	for _, f := range []struct {
		file  string
		parse func(string) (uint64, error)
		dst   *uint64
	}{
		{"state", parseIBState, &p.stateID},
		{"phys_state", parseIBState, &p.physStateID},
		{"rate", parseIBRate, &p.rate},
	} {
		v, err := readSysfsAttr(pfd, f.file, buf)
		if err != nil {
			return p, false, fmt.Errorf("reading %s: %w", f.file, err)
		}
		if *f.dst, err = f.parse(v); err != nil {
			dev.badPorts.add(0, fmt.Sprintf("%s: %v", filepath.Join(dir, f.file), err), v)
			return p, false, nil
		}
	}

	p.counters = make([]ibValue, len(c.counters))
	var errs []error
	read := func(dirfd int, sub, file string) (uint64, bool) {
		v, err := readSysfsAttr(dirfd, file, buf)
		if err != nil {
			if !ibCounterAbsent(err) {
				errs = append(errs, fmt.Errorf("reading %s: %w", file, err))
			}
			return 0, false
		}
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			if !strings.HasPrefix(v, "N/A") {
				dev.badCounters.add(0, filepath.Join(dir, sub, file)+" is not a number", v)
			}
			return 0, false
		}
		return n, true
	}
	// counters_ext exists only on kernels before 4.5.
	if efd, err := openSysfsSubdir(pfd, "counters_ext"); err == nil {
		for i := range c.counters {
			if c.counters[i].legacy == "" {
				continue
			}
			if v, ok := read(efd, "counters_ext", c.counters[i].legacy); ok {
				p.counters[i] = ibValue{value: v * c.counters[i].unit, present: true, legacy: true}
			}
		}
		unix.Close(efd)
	}
	cfd, err := openSysfsSubdir(pfd, "counters")
	if err != nil {
		// Some drivers (and RoCE ports on some kernels) have no counters
		// directory; the port's state and rate are still worth exporting.
		return p, true, errors.Join(errs...)
	}
	defer unix.Close(cfd)
	for i := range c.counters {
		if p.counters[i].present {
			continue
		}
		if v, ok := read(cfd, "counters", c.counters[i].name); ok {
			p.counters[i] = ibValue{value: v * c.counters[i].unit, present: true}
		}
	}
	return p, true, errors.Join(errs...)
}

// ibCounterAbsent tells a counter the driver does not implement from a
// failure to read one it does; procfs draws the same line.
func ibCounterAbsent(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)
}

// parseIBState parses a state file ("4: ACTIVE") into its number.
func parseIBState(s string) (uint64, error) {
	id, _, ok := strings.Cut(s, ":")
	if !ok {
		return 0, errors.New("not 'ID: NAME'")
	}
	return strconv.ParseUint(strings.TrimSpace(id), 10, 32)
}

// parseIBRate parses a rate file ("100 Gb/sec (4X EDR)") into bytes per
// second.
func parseIBRate(s string) (uint64, error) {
	value, _, ok := strings.Cut(s, " ")
	if !ok {
		return 0, errors.New("not 'N Gb/sec ...'")
	}
	gbits, err := strconv.ParseFloat(value, 64)
	if err != nil || gbits < 0 || math.IsNaN(gbits) || math.IsInf(gbits, 0) {
		return 0, fmt.Errorf("rate %q is not a number of Gb/s", value)
	}
	return uint64(gbits * 125e6), nil
}

func (c *infinibandCollector) updatePort(ch chan<- prometheus.Metric, device string, p *ibPort) {
	port := strconv.FormatUint(p.number, 10)
	// Every per-port descriptor has the label names of rate.
	l := c.portPairs.get(device, port)
	ch <- l.metric(&c.rate, float64(p.rate))
	ch <- l.metric(&c.state, float64(p.stateID))
	ch <- l.metric(&c.physState, float64(p.physStateID))
	for i := range c.counters {
		got := p.counters[i]
		if !got.present {
			continue
		}
		ctr := &c.counters[i]
		v := got.value
		ch <- l.metric(&ctr.desc, float64(v))
		if !got.legacy && ctr.width > 0 && ctr.width <= 32 {
			sat := 0.0
			if ctr.saturated(v) {
				sat = 1
			}
			ch <- c.saturatedPairs.get(device, port, ctr.name).metric(&c.saturatedDesc, sat)
		}
	}
}
