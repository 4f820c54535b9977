package collector

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs/sysfs"
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
	// name is the sysfs counter file, the label of the saturation metric.
	name string
	// get returns the counter and the width in bits of the InfiniBand PMA
	// field it came from; 0 means a 64-bit field that cannot saturate in
	// practice.
	get func(*sysfs.InfiniBandCounters) (*uint64, uint)
	// unit is what procfs multiplied the raw field by: the data counters
	// count 4-byte words and procfs reports bytes.
	unit uint64
}

// saturated reports whether v sits at the maximum of a width-bit field.
// InfiniBand PMA counters stop at their maximum instead of wrapping, so a
// rate computed from a saturated counter reads zero although traffic or
// errors continue.
func (c *ibCounter) saturated(v uint64, width uint) bool {
	if width == 0 || width >= 64 {
		return false
	}
	return v == c.unit*(uint64(1)<<width-1)
}

type infinibandCollector struct {
	fs       sysfs.FS
	classDir string
	logger   log.Logger

	counters []ibCounter

	info, rate, state, physState, saturatedDesc typedDesc
	// portPairs and saturatedPairs keep label pairs between scrapes.
	portPairs, saturatedPairs *labelPairsCache
}

func newInfiniBandCollector(sysRoot string, logger log.Logger) (*infinibandCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	sfs, err := sysfs.NewFS(sysRoot)
	if err != nil {
		return nil, fmt.Errorf("opening sysfs at %s: %w", sysRoot, err)
	}
	c := &infinibandCollector{
		fs:       sfs,
		classDir: filepath.Join(sysRoot, "class", "infiniband"),
		logger:   logger,
	}
	portLabels := []string{"device", "port"}
	name := func(n string) string { return prometheus.BuildFQName(namespace, infinibandSubsystem, n) }
	gauge := func(n, help string, labels []string) typedDesc {
		return typedDesc{prometheus.NewDesc(name(n), help, labels, nil), prometheus.GaugeValue}
	}
	c.info = gauge("info", "InfiniBand HCA of this node; the value is always 1.",
		[]string{"device", "board_id", "firmware_version", "hca_type"})
	c.rate = gauge("port_rate_bytes_per_second", "Signalling rate the port trained to, in bytes per second; a drop means the link trained down.", portLabels)
	c.state = gauge("port_state_id", "Logical state of the port: 1 down, 2 init, 3 armed, 4 active, 5 active defer.", portLabels)
	c.physState = gauge("port_physical_state_id", "Physical state of the port: 2 polling, 3 disabled, 4 port configuration training, 5 link up, 6 link error recovery, 7 phy test.", portLabels)
	c.saturatedDesc = gauge("port_counter_saturated",
		"1 if a port counter of 32 bits or fewer sits at its maximum: the hardware stopped counting and its rate reads 0; reset it with perfquery -x -R. 0 otherwise.",
		[]string{"device", "port", "counter"})

	counter := func(metric, help, file string, width uint, get func(*sysfs.InfiniBandCounters) *uint64) ibCounter {
		return ibCounter{
			desc: typedDesc{prometheus.NewDesc(name(metric), help, portLabels, nil), prometheus.CounterValue},
			name: file,
			get: func(cs *sysfs.InfiniBandCounters) (*uint64, uint) {
				return get(cs), width
			},
			unit: 1,
		}
	}
	// extended prefers the 64-bit counters_ext value that kernels before
	// 4.5 expose next to the 32-bit field; newer kernels put the 64-bit
	// value in counters/ when the HCA supports it, and nothing tells the
	// two apart, so a value at the 32-bit maximum is flagged either way.
	// baseWidth is 0 for the unicast and multicast counters, which only
	// exist as 64-bit PortCountersExtended fields.
	extended := func(metric, help, file string, unit uint64, baseWidth uint, legacy, base func(*sysfs.InfiniBandCounters) *uint64) ibCounter {
		return ibCounter{
			desc: typedDesc{prometheus.NewDesc(name(metric), help, portLabels, nil), prometheus.CounterValue},
			name: file,
			get: func(cs *sysfs.InfiniBandCounters) (*uint64, uint) {
				if v := legacy(cs); v != nil {
					return v, 0
				}
				return base(cs), baseWidth
			},
			unit: unit,
		}
	}
	// Widths are those of the PortCounters attribute in the InfiniBand
	// Architecture Specification, vol. 1, table "PortCounters", which is
	// what the kernel's sysfs counters decode (drivers/infiniband/core/sysfs.c).
	c.counters = []ibCounter{
		extended("port_data_received_bytes_total", "Data bytes received on the port, all virtual lanes.", "port_rcv_data", 4, 32,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortRcvData64 },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortRcvData }),
		extended("port_data_transmitted_bytes_total", "Data bytes transmitted on the port, all virtual lanes.", "port_xmit_data", 4, 32,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortXmitData64 },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortXmitData }),
		extended("port_packets_received_total", "Packets received on the port.", "port_rcv_packets", 1, 32,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortRcvPackets64 },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortRcvPackets }),
		extended("port_packets_transmitted_total", "Packets transmitted on the port.", "port_xmit_packets", 1, 32,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortXmitPackets64 },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortXmitPackets }),
		extended("port_unicast_packets_received_total", "Unicast packets received on the port.", "unicast_rcv_packets", 1, 0,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortUnicastRcvPackets },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.UnicastRcvPackets }),
		extended("port_unicast_packets_transmitted_total", "Unicast packets transmitted on the port.", "unicast_xmit_packets", 1, 0,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortUnicastXmitPackets },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.UnicastXmitPackets }),
		extended("port_multicast_packets_received_total", "Multicast packets received on the port.", "multicast_rcv_packets", 1, 0,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortMulticastRcvPackets },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.MulticastRcvPackets }),
		extended("port_multicast_packets_transmitted_total", "Multicast packets transmitted on the port.", "multicast_xmit_packets", 1, 0,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LegacyPortMulticastXmitPackets },
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.MulticastXmitPackets }),
		counter("port_transmit_wait_total", "Ticks during which the port had data to send but no flow-control credits: congestion downstream.", "port_xmit_wait", 32,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortXmitWait }),
		counter("port_symbol_errors_total", "Minor link errors detected on physical lanes; a steady rise points at a bad cable or transceiver.", "symbol_error", 16,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.SymbolError }),
		counter("port_link_error_recovery_total", "Times the link error recovery process completed successfully.", "link_error_recovery", 8,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LinkErrorRecovery }),
		counter("port_link_downed_total", "Times the link error recovery process failed and the link went down.", "link_downed", 8,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LinkDowned }),
		counter("port_errors_received_total", "Packets received with an error.", "port_rcv_errors", 16,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortRcvErrors }),
		counter("port_receive_remote_physical_errors_total", "Packets received marked with the EBP delimiter (bad upstream).", "port_rcv_remote_physical_errors", 16,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortRcvRemotePhysicalErrors }),
		counter("port_receive_switch_relay_errors_total", "Packets received that could not be forwarded by the switch.", "port_rcv_switch_relay_errors", 16,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortRcvSwitchRelayErrors }),
		counter("port_receive_constraint_errors_total", "Packets received that were dropped by partition or raw-packet filtering.", "port_rcv_constraint_errors", 8,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortRcvConstraintErrors }),
		counter("port_transmit_constraint_errors_total", "Packets not transmitted because of partition or raw-packet filtering.", "port_xmit_constraint_errors", 8,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortXmitConstraintErrors }),
		counter("port_discards_transmitted_total", "Outbound packets discarded because the port was down or congested.", "port_xmit_discards", 16,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortXmitDiscards }),
		counter("port_discards_received_total", "Inbound packets discarded by the port (only some drivers report it).", "port_rcv_discards", 0,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.PortRcvDiscards }),
		counter("port_local_link_integrity_errors_total", "Times the count of local physical errors exceeded its threshold.", "local_link_integrity_errors", 4,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.LocalLinkIntegrityErrors }),
		counter("port_excessive_buffer_overrun_errors_total", "Times consecutive receive buffer overruns exceeded their threshold.", "excessive_buffer_overrun_errors", 4,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.ExcessiveBufferOverrunErrors }),
		counter("port_vl15_dropped_total", "Subnet management packets (VL15) dropped for lack of buffers.", "VL15_dropped", 16,
			func(cs *sysfs.InfiniBandCounters) *uint64 { return cs.VL15Dropped }),
	}
	c.portPairs = newLabelPairsCache(c.rate.desc)
	c.saturatedPairs = newLabelPairsCache(c.saturatedDesc.desc)
	return c, nil
}

// Update reads the HCAs concurrently: on real hardware every counter file
// read is a management datagram to the HCA firmware, and one HCA that fails
// to read (a port whose attributes error out) does not hide the others.
func (c *infinibandCollector) Update(ch chan<- prometheus.Metric) error {
	if _, err := os.Stat(c.classDir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", c.classDir, ErrNoData)
	}
	names, err := c.fs.InfiniBandClassDevices()
	if err != nil {
		return fmt.Errorf("listing InfiniBand devices: %w", err)
	}
	if len(names) == 0 {
		return fmt.Errorf("no InfiniBand devices in %s: %w", c.classDir, ErrNoData)
	}
	sort.Strings(names)
	devs := make([]*sysfs.InfiniBandDevice, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			devs[i], errs[i] = c.fs.InfiniBandDevice(n)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("reading InfiniBand device %s: %w", n, errs[i])
			}
		}()
	}
	wg.Wait()

	for _, dev := range devs {
		if dev == nil {
			continue
		}
		name := labelValue(dev.Name)
		ch <- c.info.mustNewConstMetric(1, name, labelValue(dev.BoardID), labelValue(dev.FirmwareVersion), labelValue(dev.HCAType))
		ports := make([]uint, 0, len(dev.Ports))
		for p := range dev.Ports {
			ports = append(ports, p)
		}
		sort.Slice(ports, func(i, j int) bool { return ports[i] < ports[j] })
		for _, num := range ports {
			c.updatePort(ch, name, dev.Ports[num])
		}
	}
	c.portPairs.sweep()
	c.saturatedPairs.sweep()
	return errors.Join(errs...)
}

func (c *infinibandCollector) updatePort(ch chan<- prometheus.Metric, device string, p sysfs.InfiniBandPort) {
	port := strconv.FormatUint(uint64(p.Port), 10)
	// Every per-port descriptor has the label names of rate.
	l := c.portPairs.get(device, port)
	ch <- l.metric(&c.rate, float64(p.Rate))
	ch <- l.metric(&c.state, float64(p.StateID))
	ch <- l.metric(&c.physState, float64(p.PhysStateID))
	for i := range c.counters {
		ctr := &c.counters[i]
		v, width := ctr.get(&p.Counters)
		if v == nil {
			continue
		}
		ch <- l.metric(&ctr.desc, float64(*v))
		if width > 0 && width <= 32 {
			sat := 0.0
			if ctr.saturated(*v, width) {
				sat = 1
			}
			ch <- c.saturatedPairs.get(device, port, ctr.name).metric(&c.saturatedDesc, sat)
		}
	}
}
