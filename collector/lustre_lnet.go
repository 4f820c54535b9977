package collector

// The LNet collector: the health of this node's own LNet network
// interfaces (NIs) and, added up per network, of its peers' NIs, on Lustre
// clients and servers alike.
//
// LNet health (2.12 and later) gives every NI, local or a peer's, a value
// from 0 to 1000 (LNET_MAX_HEALTH_VALUE) that each failed send lowers by
// health_sensitivity and recovery pings raise again; LNet sends over the
// healthiest NIs, so a value under 1000 is a path that failed recently.
// Only lnetctl reports it: the debugfs tables (/sys/kernel/debug/lnet/nis
// and peers, lnet/lnet/lnet_debugfs.c) print no health value, and the
// peers table's state column says "NA" unless the peer is a router or
// peer aliveness is on. lnetctl asks the kernel through /dev/lnet ioctls
// (to 2.15) or generic netlink (2.16 on), both for CAP_SYS_ADMIN only, so
// a daemon that is not root runs it through sudo (--collector.lustre.sudo,
// the switch of Lustre's other root-only reads).
//
// Two command lines, each allowed as such by the packaged sudoers file:
// `lnetctl net show -v 2` and `lnetctl peer show -v 2`, the detail level
// at which both print "health stats" (Lustre's own sanity-lnet.sh reads
// health the same way). They run in the background every
// --collector.lnet.interval, killed with their process group at
// --collector.lnet.timeout; a scrape exports the last round.
//
// Series stay bounded on a server that knows thousands of clients: one
// per local NI, and per network a count of peer NIs by health bucket, the
// count whose state is down, and the lowest peer NI health value; never
// one series per peer.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

const lnetSubsystem = "lnet"

// The lnet collector's flags; with --collector.lustre.sudo, lnetctl runs
// through sudo as lctl does.
var lnetFlags = struct {
	lnetctlPath *string
	peers       *bool
	round       roundFlags
}{
	lnetctlPath: kingpin.Flag("collector.lnet.lnetctl-path",
		"Path of lnetctl, which reports LNet health; run through 'sudo -n' with --collector.lustre.sudo, as it needs root.").
		Default("/usr/sbin/lnetctl").String(),
	peers: kingpin.Flag("collector.lnet.peers",
		"Also run 'lnetctl peer show -v 2' for the health of the peers' NIs (counts per network, never a series per peer). "+
			"It prints about 1 KiB per peer NI: on a server with more than about 10,000 peer NIs turn it off.").
		Default("true").Bool(),
	round: declareRoundFlags(roundFlagsSpec{name: lnetSubsystem, interval: "60s", timeout: "10s",
		intervalHelp: "How often lnetctl is run, in the background; scrapes export the last round.",
		timeoutHelp:  "How long one round of lnetctl runs may take; then lnetctl is killed with its process group."}),
}

func init() {
	registerCollector(lnetSubsystem, true, func(logger log.Logger) (Collector, error) {
		return newLnetCollector(lnetConfig{
			lnetctlPath: *lnetFlags.lnetctlPath,
			moduleDir:   sysFilePath("module", "lnet"),
			sudo:        *lustreSudo,
			peers:       *lnetFlags.peers,
			interval:    *lnetFlags.round.interval,
			timeout:     *lnetFlags.round.timeout,
		}, logger)
	})
}

// lnetConfig says where lnetctl and the module's sysfs directory are, and
// how lnetctl is run.
type lnetConfig struct {
	lnetctlPath string
	// moduleDir is /sys/module/lnet, there while the module is loaded.
	moduleDir         string
	sudo, peers       bool
	interval, timeout time.Duration
}

// lnetctlArgs is the command line of one show, exactly as the sudoers
// file allows it.
func lnetctlArgs(what string) []string {
	return []string{what, "show", "-v", "2"}
}

// The sources of plateau_collector_parse_errors_total.
const (
	lnetSourceNet  = "net_show"
	lnetSourcePeer = "peer_show"
)

// The health buckets of plateau_lnet_peer_nis.
const (
	lnetHealthy   = "healthy"   // at the maximum, 1000
	lnetDegraded  = "degraded"  // 1 to 999: failed lately, recovering
	lnetUnhealthy = "unhealthy" // 0
	lnetMaxHealth = 1000
)

// lnetRound is what one background round exported.
type lnetRound struct {
	metrics []prometheus.Metric
	// absent says why there is nothing to collect although the module is
	// loaded: LNet not configured, or lnetctl refused for want of root.
	absent string
	err    error
}

type lnetCollector struct {
	cfg    lnetConfig
	logger log.Logger
	runner *commandRunner

	niUp, niHealth, peerNIs, peerNIsDown, peerHealthMin typedDesc

	parseErrs *parseErrorCounter
	rounds    *backgroundRounds[*lnetRound]

	// lastErr is the last round's failure as logged.
	lastErr errorChange
}

func newLnetCollector(cfg lnetConfig, logger log.Logger) (*lnetCollector, error) {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if cfg.interval <= 0 || cfg.timeout <= 0 {
		return nil, fmt.Errorf("lnet interval and timeout must be positive, got %s and %s", cfg.interval, cfg.timeout)
	}
	desc := func(name, help string, labels ...string) typedDesc {
		return typedDesc{prometheus.NewDesc(prometheus.BuildFQName(namespace, lnetSubsystem, name), help, labels, nil), prometheus.GaugeValue}
	}
	c := &lnetCollector{
		cfg:       cfg,
		logger:    logger,
		runner:    newCommandRunner(cfg.sudo),
		parseErrs: newParseErrorCounter(logger),
		niUp: desc("ni_up",
			"1 if this node's LNet network interface is up, 0 if down (lnetctl net show status).", "net", "nid"),
		// 1000 is full health; each failed send lowers it by
		// health_sensitivity (100 by default), recovery pings raise it.
		niHealth: desc("ni_health_value",
			"Health value of this node's LNet network interface, 0 to 1000 (full health).", "net", "nid"),
		// health is healthy (1000), degraded (1 to 999) or unhealthy
		// (0); all three are exported for every network, 0 when none.
		peerNIs: desc("peer_nis",
			"Peers' LNet network interfaces on the network, by health: healthy (1000), degraded (1 to 999), unhealthy (0).", "net", "health"),
		// Known only for routers and where peer aliveness is on; LNet
		// prints NA for the others, which are not counted.
		peerNIsDown: desc("peer_nis_down",
			"Peers' LNet network interfaces on the network whose state is down.", "net"),
		peerHealthMin: desc("peer_ni_health_min",
			"Lowest health value of the peers' LNet network interfaces on the network, 0 to 1000.", "net"),
	}
	c.rounds = newBackgroundRounds(cfg.interval, cfg.timeout, c.round)
	return c, nil
}

func (c *lnetCollector) parseErrors() *parseErrorCounter { return c.parseErrs }

// presence: LNet's module is loaded and lnetctl is installed. Both are
// stats, so an absent LNet never starts the rounds.
func (c *lnetCollector) presence() (bool, string) {
	if _, err := os.Stat(c.cfg.moduleDir); err != nil {
		return false, "LNet is not loaded (no " + c.cfg.moduleDir + ")"
	}
	if _, err := os.Stat(c.cfg.lnetctlPath); errors.Is(err, fs.ErrNotExist) {
		return false, "no " + c.cfg.lnetctlPath
	}
	return true, ""
}

// Update exports the last round. The first scrape starts the rounds and
// waits for the first; later scrapes never wait for lnetctl.
func (c *lnetCollector) Update(ch chan<- prometheus.Metric) error {
	if present, reason := c.presence(); !present {
		return fmt.Errorf("%s: %w", reason, ErrNoData)
	}
	last, ok := c.rounds.latest()
	if !ok {
		return errors.New("lnet: no round has finished yet")
	}
	if last.absent != "" {
		return fmt.Errorf("%s: %w", last.absent, ErrNoData)
	}
	for _, m := range last.metrics {
		ch <- m
	}
	return last.err
}

// Close stops the rounds.
func (c *lnetCollector) Close() error {
	c.rounds.Close()
	return nil
}

// show runs one lnetctl show and parses what it printed. absent is set
// when lnetctl could not answer because LNet is not configured or the
// caller is not root.
func (c *lnetCollector) show(ctx context.Context, what string) (s lnetShow, absent string, err error) {
	out, err := c.runner.runKeyed(ctx, "lnetctl "+what, nil, c.cfg.lnetctlPath, lnetctlArgs(what)...)
	var exit *commandError
	if err != nil && !errors.As(err, &exit) {
		return s, "", err
	}
	s = parseLnetctlShow(out)
	if err == nil && s.errMsg == "" {
		return s, "", nil
	}
	// lnetctl prints its error block on stderr (or stdout, by version).
	msg := s.errMsg
	if exit != nil {
		msg += " " + exit.stderr
	}
	switch {
	case strings.Contains(msg, "Network is down"):
		return s, "LNet is loaded but not configured (lnetctl: Network is down)", nil
	case !c.cfg.sudo && lnetRefused(msg):
		return s, "lnetctl needs root; start with --collector.lustre.sudo to export LNet health (docs/lustre.md)", nil
	}
	if err == nil {
		err = errors.New(s.errMsg)
	}
	return s, "", fmt.Errorf("lnetctl %s show: %w", what, err)
}

// lnetRefused says whether lnetctl's message is the kernel refusing a
// caller without CAP_SYS_ADMIN: EACCES from the ioctl (to 2.15), EPERM from
// netlink (2.16 on).
func lnetRefused(msg string) bool {
	return strings.Contains(msg, "Permission denied") || strings.Contains(msg, "Operation not permitted")
}

// round runs the shows once, within the timeout, and builds the metrics.
func (c *lnetCollector) round() *lnetRound {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.timeout)
	defer cancel()
	r := &lnetRound{}
	var errs []error
	nets, absent, err := c.show(ctx, "net")
	c.parseErrs.record(lnetSourceNet, nets.bad)
	if absent != "" {
		r.absent = absent
		return r
	}
	if err != nil {
		errs = append(errs, err)
	}
	var ms []prometheus.Metric
	for _, ni := range nets.nis {
		net := ni.net
		if net == "" {
			net = lnetNetOf(ni.nid)
		}
		if ni.nid == "" || net == "lo" {
			continue // the loopback NI is always up; its health means nothing
		}
		lv := []string{labelValue(net), labelValue(ni.nid)}
		up := 0.0
		if ni.state == "up" {
			up = 1
		}
		ms = append(ms, c.niUp.mustNewConstMetric(up, lv...))
		if ni.hasHealth {
			ms = append(ms, c.niHealth.mustNewConstMetric(float64(ni.health), lv...))
		}
	}
	if c.cfg.peers {
		peers, _, err := c.show(ctx, "peer")
		c.parseErrs.record(lnetSourcePeer, peers.bad)
		if err != nil {
			errs = append(errs, err)
		} else {
			ms = append(ms, c.peerMetrics(peers.peers)...)
		}
	}
	c.logError(errors.Join(errs...))
	freezeMetrics(ms)
	r.metrics, r.err = ms, errors.Join(errs...)
	return r
}

// lnetPeerNet is what the peer NIs of one network add up to.
type lnetPeerNet struct {
	buckets   map[string]int
	down      int
	minHealth int
	hasHealth bool
}

// peerMetrics adds the peer NIs up per network: a handful of series per
// network however many peers there are.
func (c *lnetCollector) peerMetrics(peers []lnetIface) []prometheus.Metric {
	nets := map[string]*lnetPeerNet{}
	for _, p := range peers {
		net := lnetNetOf(p.nid)
		if p.nid == "" || net == "lo" {
			continue
		}
		n := nets[net]
		if n == nil {
			n = &lnetPeerNet{buckets: map[string]int{}}
			nets[net] = n
		}
		if p.state == "down" {
			n.down++
		}
		if !p.hasHealth {
			continue
		}
		switch {
		case p.health >= lnetMaxHealth:
			n.buckets[lnetHealthy]++
		case p.health > 0:
			n.buckets[lnetDegraded]++
		default:
			n.buckets[lnetUnhealthy]++
		}
		if !n.hasHealth || p.health < n.minHealth {
			n.minHealth, n.hasHealth = p.health, true
		}
	}
	names := make([]string, 0, len(nets))
	for net := range nets {
		names = append(names, net)
	}
	sort.Strings(names)
	var ms []prometheus.Metric
	for _, net := range names {
		n, lv := nets[net], labelValue(net)
		for _, b := range []string{lnetHealthy, lnetDegraded, lnetUnhealthy} {
			ms = append(ms, c.peerNIs.mustNewConstMetric(float64(n.buckets[b]), lv, b))
		}
		ms = append(ms, c.peerNIsDown.mustNewConstMetric(float64(n.down), lv))
		if n.hasHealth {
			ms = append(ms, c.peerHealthMin.mustNewConstMetric(float64(n.minHealth), lv))
		}
	}
	return ms
}

// logError logs a round's failure when it differs from the last one.
func (c *lnetCollector) logError(err error) {
	if c.lastErr.changed(err) {
		level.Warn(c.logger).Log("msg", "lnetctl failed; LNet health series are missing", "err", err)
	}
}
