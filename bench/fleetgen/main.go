// Command fleetgen writes synthetic OpenMetrics text for a fleet of
// plateau_exporter nodes, for bench/fleet_rules.sh: every series that the
// rules of dashboards/rules.yml, alerts.yml and fleet_alerts.yml read, with the
// labels the daemon and a Prometheus scrape give them (job, instance,
// target, probe, kind, op), for nodes node0001..nodeNNNN.
//
// The probes are those of packaging/plateau.yml: its active target "local"
// (seq, md) and its GPFS example "scratch" (seq, shared, rand, md, md4k),
// 7 probes and 20 probe ops per node. Most nodes are normal; a few are in
// sudden regression, below their plateau, failing, or show a cause (a
// file system unmounted, RDMA down, long waiters, a busy node, a slow
// InfiniBand port, QoS maintenance), so that every rule has something to
// find.
//
// Samples are written every -step up to -end (unix seconds). Only the
// series that the rules read over a range get the whole history: the
// probe ratio and the last-success timestamp (-history, 6h ranges),
// the day-long "had it within a day" series (-long), and the counters read
// by rate or increase (65m). Every other series, read only at the
// evaluation instant, gets -short of history: an instant selector reads
// one sample, so older samples would only make the backfill longer.
//
// With -head, the last span before -end is left out of the files, and a
// second run with -remote-write sends exactly that span to a running
// Prometheus, so that the recent samples sit in its head as a scrape puts
// them there, and only the older ones in backfilled blocks.
//
// The output goes to one file per -block window (aligned as promtool
// aligns its blocks), so that each `promtool tsdb create-blocks-from
// openmetrics` run parses only the samples of its own block: promtool
// parses its whole input once for every block it writes.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

const probeInterval = 900 // seconds, the default 15m

// warningRatio is every probe's warning threshold (the default config's).
const warningRatio = 0.8

// belowWarning is the daemon's per-op comparison that its per-target
// verdicts take the maximum of: 1 when a median ratio is under the warning
// threshold, else 0.
func belowWarning(median float64) float64 {
	if median < warningRatio {
		return 1
	}
	return 0
}

type probeDef struct {
	target, name, kind string
	ops                []string
	baseline           float64 // bytes/s (or ops/s for metadata) of every op
	runBytes           float64 // bytes a run moves per op
}

var probes = []probeDef{
	{"local", "seq", "sequential", []string{"write", "read"}, 1.2e9, 16 << 20},
	{"local", "md", "metadata", []string{"create", "stat", "read", "remove"}, 8000, 4096},
	{"scratch", "seq", "sequential", []string{"write", "read"}, 2.5e9, 256 << 20},
	{"scratch", "shared", "shared_file", []string{"write", "read"}, 5e9, 256 << 20},
	{"scratch", "rand", "random", []string{"read", "write"}, 2e8, 1 << 30},
	{"scratch", "md", "metadata", []string{"create", "stat", "read", "remove"}, 20000, 4096},
	{"scratch", "md4k", "metadata", []string{"create", "stat", "read", "remove"}, 9000, 4 << 20},
}

var gpfsFilesystems = []string{"scratch", "home"}

type node struct {
	i    int
	inst string
	// What is wrong with it, if anything.
	regress, chronic, failing, unmounted, rdmaDown, waiters, busy, ibSlow, ibErrors, qosMaint bool
}

func newNode(i int) node {
	n := node{i: i, inst: fmt.Sprintf("node%04d:9731", i)}
	n.regress = i%97 == 0     // ~1%: sudden regression on scratch, last 75 minutes
	n.chronic = i%211 == 0    // below plateau for the whole history (scratch md)
	n.failing = i%503 == 0    // scratch rand fails since 3h
	n.unmounted = i%1000 == 7 // scratch gone 30 minutes ago
	n.rdmaDown = i%1000 == 13
	n.waiters = i%1000 == 21
	n.busy = i%300 == 5
	n.ibSlow = i%1000 == 33
	n.ibErrors = i%1000 == 41
	n.qosMaint = i%50 == 0
	return n
}

// uni is a deterministic number in [-1, 1) from its keys.
func uni(keys ...any) float64 {
	h := fnv.New64a()
	fmt.Fprint(h, keys...)
	return float64(h.Sum64()>>11)/float64(1<<53)*2 - 1
}

func offset(n node, p probeDef) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%s", n.i, p.target, p.name)
	return int64(h.Sum64() % probeInterval)
}

// series is one time series: its text up to the value, the first
// timestamp it has, and its value at a time.
type series struct {
	name  string
	kv    []string // label pairs after the name
	from  int64
	value func(t int64) float64
	// every > 0 keeps one sample each every seconds (the first at or after
	// each multiple of it): a record of a group with a longer interval
	// than the scrape's. A value that is NaN is no sample.
	every int64
}

// sampled says whether the series has a sample at t, a point of the
// -step grid.
func (s series) sampled(t, step int64) bool {
	return s.every <= 0 || floorDiv(t, s.every) != floorDiv(t-step, s.every)
}

type gen struct {
	end, step                     int64
	history, long, counter, short int64
	epoch                         int64 // where counters start from
	// head > 0: the samples of the last head seconds up to end are not
	// written to the OpenMetrics files (those become the blocks) but sent
	// to a running Prometheus by remoteWrite, into its head, as a scrape
	// would have put them there.
	head int64
}

func labels(name string, kv ...string) string {
	s := name + "{"
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			s += ","
		}
		s += kv[i] + "=" + strconv.Quote(kv[i+1])
	}
	return s + "} "
}

func constant(v float64) func(int64) float64 { return func(int64) float64 { return v } }

// nodeSeries lists every series of one node.
func (g gen) nodeSeries(n node) []series {
	var out []series
	add := func(from int64, v func(int64) float64, name string, kv ...string) {
		kv = append([]string{"instance", n.inst, "job", "plateau"}, kv...)
		if g.head > 0 {
			// Every series has samples in the head window, as a scraped
			// fleet does, whatever history it has before it.
			from = min(from, g.end-g.head)
		}
		out = append(out, series{name: name, kv: kv, from: from, value: v})
	}
	hist, long, ctr, short := g.end-g.history, g.end-g.long, g.end-g.counter, g.end-g.short
	end := g.end

	add(short, constant(1), "up")
	// The history of the records that rules.yml's groups with an interval
	// of their own write (plateau.causes.day every 5m, plateau.causes.hour
	// and plateau.infiniband.hour every hour), as if they had run through
	// the -long history: one sample an interval, the maximum over it, as
	// the groups write them, so that the levels read the samples they read
	// in production.
	// plateau.causes.5m keeps only what the node had (at least had, 1 for
	// a mount or RDMA, 5 for a port's link): under it there is no sample,
	// and so none in the hourly level either.
	level := func(name string, interval int64, had float64, v func(int64) float64, kv ...string) {
		add(long, func(t int64) float64 {
			m := v(t)
			for d := g.step; d < interval; d += g.step {
				m = math.Max(m, v(t-d))
			}
			if m < had {
				return math.NaN()
			}
			return m
		}, name, kv...)
		out[len(out)-1].every = interval
	}
	targetRegression := map[string][]func(int64) float64{}
	targetLowScore := map[string][]func(int64) float64{}
	targetNormalRatio := map[string][]func(int64) float64{}
	targetIOBytes := map[string][]func(int64) float64{}
	targetBelowWarning := map[string][]func(int64) float64{}
	targetBelowPlateau := map[string][]func(int64) float64{}
	targetFailing := map[string][]func(int64) float64{}
	for _, p := range probes {
		p := p
		off := offset(n, p)
		run := func(t int64) int64 { return floorDiv(t-off, probeInterval) }
		runTime := func(k int64) int64 { return off + k*probeInterval }
		failing := n.failing && p.target == "scratch" && p.name == "rand"
		failSince := end - 3*3600
		ratio := func(op string, k int64) float64 {
			base := 1 + 0.03*uni(n.i, p.target, p.name, op)
			v := base * (1 + 0.04*uni(n.i, p.target, p.name, op, k))
			if p.target == "scratch" && n.regress && runTime(k) >= end-75*60 {
				v *= 0.45
			}
			if p.target == "scratch" && p.name == "md" && n.chronic {
				v *= 0.7
			}
			return v
		}
		normal := func(op string) float64 { return 1 + 0.03*uni(n.i, p.target, p.name, op) }
		pk := []string{"kind", p.kind, "probe", p.name, "target", p.target}
		lastSuccess := func(t int64) float64 {
			k := run(t)
			if failing && runTime(k) >= failSince {
				k = floorDiv(failSince-off, probeInterval)
			}
			return float64(runTime(k))
		}
		success := func(t int64) float64 {
			if failing && runTime(run(t)) >= failSince {
				return 0
			}
			return 1
		}
		add(hist, lastSuccess, "plateau_probe_last_success_timestamp_seconds", pk...)
		add(short, func(t int64) float64 { return float64(runTime(run(t))) }, "plateau_probe_last_run_timestamp_seconds", pk...)
		add(short, success, "plateau_probe_success", pk...)
		// The store's plateau_probe_failing: the last run failed and the
		// last success is over two intervals old. Every probe runs on time
		// (plateau_probe_not_run 0).
		probeFailing := func(t int64) float64 {
			if success(t) == 0 && float64(t)-lastSuccess(t) > 2*probeInterval {
				return 1
			}
			return 0
		}
		add(short, probeFailing, "plateau_probe_failing", pk...)
		targetFailing[p.target] = append(targetFailing[p.target], probeFailing)
		add(short, constant(0), "plateau_probe_not_run", pk...)
		add(short, constant(probeInterval), "plateau_probe_interval_seconds", pk...)
		// The node's own I/O during the last run, per direction: a few
		// MB/s, far under half of any plateau (no node is busy).
		for _, dir := range []string{"read", "write"} {
			add(short, constant(4e6), "plateau_probe_concurrent_bytes_per_second", "kind", p.kind, "op", dir, "probe", p.name, "target", p.target)
		}
		add(short, constant(0), "plateau_baseline_io_mode_mismatch", pk...)
		runs0 := run(g.epoch)
		for _, result := range []string{"success", "failure", "timeout", "skipped"} {
			result := result
			add(short, func(t int64) float64 {
				k := run(t) - runs0
				fails := int64(0)
				if failing && runTime(run(t)) >= failSince {
					fails = run(t) - floorDiv(failSince-off, probeInterval) + 1
				}
				switch result {
				case "success":
					return float64(k - fails)
				case "failure":
					return float64(fails)
				}
				return 0
			}, "plateau_probe_runs_total", "kind", p.kind, "probe", p.name, "result", result, "target", p.target)
		}
		for sev, v := range map[string]float64{"warning": warningRatio, "critical": 0.5} {
			add(short, constant(v), "plateau_alert_threshold_ratio", "probe", p.name, "severity", sev, "target", p.target)
		}
		for _, op := range p.ops {
			op := op
			ok := []string{"kind", p.kind, "op", op, "probe", p.name, "target", p.target}
			add(hist, func(t int64) float64 { return ratio(op, run(t)) }, "plateau_probe_ratio", ok...)
			// The change statistics, roughly as the daemon computes them:
			// the means of the last four and two runs against the normal,
			// and how many runs in a row were low.
			mean := func(t int64, runs int64) float64 {
				k, s := run(t), 0.0
				for j := int64(0); j < runs; j++ {
					s += math.Log(ratio(op, k-j))
				}
				return math.Exp(s/float64(runs)) / normal(op)
			}
			add(short, func(t int64) float64 { return mean(t, 4) }, "plateau_probe_change_ratio", ok...)
			add(short, func(t int64) float64 { return mean(t, 2) }, "plateau_probe_change_fast_ratio", ok...)
			noise := 0.03 + 0.01*uni(n.i, p.name, op, "noise")
			fastNoise := 0.045 + 0.01*uni(n.i, p.name, op, "fastnoise")
			lowRuns := func(t int64) int {
				k, low := run(t), 0
				for low < 30 && ratio(op, k-int64(low)) < 0.9*normal(op) {
					low++
				}
				return low
			}
			add(short, constant(noise), "plateau_probe_change_noise_ratio", ok...)
			add(short, constant(fastNoise), "plateau_probe_change_fast_noise_ratio", ok...)
			add(short, func(t int64) float64 { return float64(lowRuns(t)) }, "plateau_probe_change_low_runs", ok...)
			// The daemon's verdicts, from the same functions the store
			// exports them with: the regression verdict of the statistics
			// above, and the medians of the ratio over the last runs
			// (RunVerdicts with a plateau of 1, as the values are ratios).
			regression := func(t int64) float64 {
				c := plateau.Change{Ratio: mean(t, 4), Noise: noise, FastRatio: mean(t, 2), FastNoise: fastNoise, LowRuns: lowRuns(t)}
				if c.Regression() {
					return 1
				}
				return 0
			}
			add(short, regression, "plateau_probe_regression", ok...)
			targetRegression[p.target] = append(targetRegression[p.target], regression)
			// The op's low score and the size of its drop, from the
			// functions the store uses, over its last runs; the store
			// combines a target's ops with plateau.TargetScore and the
			// lowest ratio.
			scored := func(t int64) []float64 {
				k := run(t)
				ratios := make([]float64, plateau.NormalRuns+plateau.ScoreRuns)
				for j := range ratios {
					ratios[j] = ratio(op, k-int64(len(ratios)-1-j))
				}
				return ratios
			}
			targetLowScore[p.target] = append(targetLowScore[p.target], func(t int64) float64 {
				score, _ := plateau.LowScore(scored(t))
				return score
			})
			targetNormalRatio[p.target] = append(targetNormalRatio[p.target], func(t int64) float64 {
				r, _ := plateau.NormalRatio(scored(t))
				return r
			})
			medians := func(t int64) plateau.Verdicts {
				k := run(t)
				ratios := make([]float64, plateau.LongMedianRuns)
				for j := range ratios {
					ratios[j] = ratio(op, k-int64(len(ratios)-1-j))
				}
				return plateau.RunVerdicts(ratios, 1)
			}
			add(short, func(t int64) float64 { return medians(t).RecentMedian }, "plateau_probe_ratio_median_3_runs", ok...)
			targetBelowWarning[p.target] = append(targetBelowWarning[p.target], func(t int64) float64 { return belowWarning(medians(t).RecentMedian) })
			add(short, func(t int64) float64 { return medians(t).LongMedian }, "plateau_probe_ratio_median_24_runs", ok...)
			targetBelowPlateau[p.target] = append(targetBelowPlateau[p.target], func(t int64) float64 { return belowWarning(medians(t).LongMedian) })
			ioBytes := func(t int64) float64 { return float64(run(t)-runs0) * p.runBytes }
			add(ctr, ioBytes, "plateau_probe_io_bytes_total", ok...)
			targetIOBytes[p.target] = append(targetIOBytes[p.target], ioBytes)
			if p.kind == "metadata" {
				add(short, constant(p.baseline), "plateau_baseline_operations_per_second", ok...)
			} else {
				add(short, constant(p.baseline), "plateau_baseline_throughput_bytes_per_second", ok...)
			}
		}
	}
	// The daemon's per-target maxima of the two verdicts.
	maxOf := func(fs []func(int64) float64) func(int64) float64 {
		return func(t int64) float64 {
			m := 0.0
			for _, f := range fs {
				m = math.Max(m, f(t))
			}
			return m
		}
	}
	sumOf := func(fs []func(int64) float64) func(int64) float64 {
		return func(t int64) float64 {
			s := 0.0
			for _, f := range fs {
				s += f(t)
			}
			return s
		}
	}
	for _, tg := range []string{"local", "scratch"} {
		add(short, maxOf(targetRegression[tg]), "plateau_probe_target_regression", "target", tg)
		scores := targetLowScore[tg]
		add(short, func(t int64) float64 {
			v := make([]float64, len(scores))
			for i, f := range scores {
				v[i] = f(t)
			}
			return plateau.TargetScore(v)
		}, "plateau_probe_target_low_score", "target", tg)
		ratios := targetNormalRatio[tg]
		add(short, func(t int64) float64 {
			lowest := math.Inf(1)
			for _, f := range ratios {
				lowest = math.Min(lowest, f(t))
			}
			return lowest
		}, "plateau_probe_target_normal_ratio", "target", tg)
		add(short, maxOf(targetBelowWarning[tg]), "plateau_probe_target_below_warning", "target", tg)
		add(short, maxOf(targetBelowPlateau[tg]), "plateau_probe_target_below_plateau", "target", tg)
		add(ctr, sumOf(targetIOBytes[tg]), "plateau_probe_target_io_bytes_total", "target", tg)
		// The store's per-target counts and comparisons: no probe runs
		// late or in another mode than its baseline, and the node's own
		// I/O (plateau_probe_concurrent_bytes_per_second, 4 MB/s) is far
		// under half of any plateau.
		add(short, sumOf(targetFailing[tg]), "plateau_probe_target_failing_probes", "target", tg)
		add(short, constant(0), "plateau_probe_target_not_run_probes", "target", tg)
		add(short, constant(0), "plateau_baseline_target_io_mode_mismatch_probes", "target", tg)
		add(short, constant(0), "plateau_probe_target_concurrent_busy", "target", tg)
		add(short, constant(0), "plateau_probe_hung", "target", tg)
		add(short, constant(0), "plateau_probe_abandoned_workers", "target", tg)
	}

	// GPFS.
	for _, fs := range gpfsFilesystems {
		fs := fs
		mounted := func(t int64) float64 {
			if fs == "scratch" && n.unmounted && t >= end-30*60 {
				return 0
			}
			return 1
		}
		for _, mode := range []string{"rw", "ro"} {
			mode := mode
			add(long, func(t int64) float64 {
				if mode == "rw" {
					return mounted(t)
				}
				return 0
			}, "plateau_gpfs_filesystem_mounted", "filesystem", fs, "mode", mode, "mountpoint", "/gpfs/"+fs)
			modeMounted := func(t int64) float64 {
				if mode == "rw" {
					return mounted(t)
				}
				return 0
			}
			if mode == "rw" { // never mounted read-only: no level series
				level("instance_filesystem_mode:plateau_gpfs_filesystem_mounted:max5m", 300, 1, modeMounted, "filesystem", fs, "mode", mode)
				level("instance_filesystem_mode:plateau_gpfs_filesystem_mounted:max1h", 3600, 1, modeMounted, "filesystem", fs, "mode", mode)
			}
		}
		add(short, constant(0), "plateau_gpfs_disks_not_up", "filesystem", fs)
		add(short, constant(0), "plateau_gpfs_disks_not_ready", "filesystem", fs)
		qos := 0.0
		if fs == "scratch" {
			qos = 1
		}
		add(short, constant(qos), "plateau_gpfs_qos_enabled", "filesystem", fs)
		readRate := 2e7 * (1 + uni(n.i, fs, "r"))
		if fs == "home" {
			readRate /= 20
		}
		writeRate := readRate / 3
		for _, d := range []struct {
			name string
			rate float64
		}{{"plateau_gpfs_fs_read_bytes_total", readRate}, {"plateau_gpfs_fs_write_bytes_total", writeRate}} {
			d := d
			add(ctr, func(t int64) float64 {
				v := d.rate * float64(t-g.epoch)
				if n.busy && fs == "scratch" && t > end-40*60 {
					v += 2e9 * float64(t-(end-40*60))
				}
				return math.Floor(v)
			}, d.name, "cluster", "hpc.example.org", "filesystem", fs)
		}
	}
	maint := 0.0
	if n.qosMaint {
		maint = 1500
	}
	add(short, constant(maint), "plateau_gpfs_qos_iops", "class", "maintenance", "filesystem", "scratch", "pool", "data")
	add(short, constant(800), "plateau_gpfs_qos_iops", "class", "other", "filesystem", "scratch", "pool", "data")
	rdma := func(t int64) float64 {
		if n.rdmaDown && t >= end-30*60 {
			return 0
		}
		return 1
	}
	add(long, rdma, "plateau_gpfs_verbs_rdma_started")
	level("instance:plateau_gpfs_verbs_rdma_started:max5m", 300, 1, rdma)
	level("instance:plateau_gpfs_verbs_rdma_started:max1h", 3600, 1, rdma)
	longest, ioWaiters := 0.02, 0.0
	if n.waiters {
		longest, ioWaiters = 120, 3
	}
	add(short, constant(longest), "plateau_gpfs_waiter_longest_seconds")
	for _, rc := range []string{"io", "network", "other", "rebuild", "token"} {
		v := 0.0
		if rc == "io" {
			v = ioWaiters
		}
		add(short, constant(v), "plateau_gpfs_waiters", "reason_class", rc)
	}
	for _, st := range []string{"active", "arbitrating", "down", "unknown", "unresponsive"} {
		v := 0.0
		if st == "active" {
			v = 1
		}
		add(short, constant(v), "plateau_gpfs_state", "state", st)
	}
	statuses := []string{"CHECKING", "DEGRADED", "DEPEND", "DISABLED", "FAILED", "HEALTHY", "STARTING", "STOPPED", "SUSPENDED", "TIPS", "UNKNOWN"}
	entity := fmt.Sprintf("node%04d", n.i)
	for _, ce := range [][2]string{{"NODE", entity}, {"GPFS", entity}, {"NETWORK", entity}, {"FILESYSTEM", "scratch"}, {"FILESYSTEM", "home"}} {
		for _, st := range statuses {
			v := 0.0
			if st == "HEALTHY" {
				v = 1
			}
			add(short, constant(v), "plateau_gpfs_health_status", "component", ce[0], "entity", ce[1], "status", st)
		}
	}

	// InfiniBand: one HDR port.
	ib := []string{"device", "mlx5_0", "port", "1"}
	add(short, constant(4), "plateau_infiniband_port_state_id", ib...)
	add(long, constant(5), "plateau_infiniband_port_physical_state_id", ib...)
	level("instance_device_port:plateau_infiniband_port_physical_state_id:max5m", 300, 5, constant(5), ib...)
	level("instance_device_port:plateau_infiniband_port_physical_state_id:max1h", 3600, 5, constant(5), ib...)
	ibRate := func(t int64) float64 {
		if n.ibSlow && t >= end-30*60 {
			return 6.25e9
		}
		return 1.25e10
	}
	add(long, ibRate, "plateau_infiniband_port_rate_bytes_per_second", ib...)
	// rules.yml's plateau.infiniband.hour: the hour's maximum, and the
	// week's, which is the EDR rate every port had before the last 30
	// minutes.
	level("instance_device_port:plateau_infiniband_port_rate_bytes_per_second:max1h", 3600, 0, ibRate, ib...)
	add(long, constant(1.25e10), "instance_device_port:plateau_infiniband_port_rate_bytes_per_second:max7d", ib...)
	out[len(out)-1].every = 3600
	for _, c := range []string{"symbol_errors", "link_error_recovery", "link_downed", "errors_received",
		"local_link_integrity_errors", "excessive_buffer_overrun_errors", "receive_remote_physical_errors"} {
		c := c
		add(ctr, func(t int64) float64 {
			if c == "symbol_errors" && n.ibErrors && t > end-3600 {
				return float64(3 + (t-(end-3600))/60)
			}
			return 3
		}, "plateau_infiniband_port_"+c+"_total", ib...)
	}

	// NVMe: two local drives.
	for _, dev := range []string{"nvme0", "nvme1"} {
		d := []string{"device", dev}
		add(short, constant(0), "plateau_nvme_critical_warning", d...)
		add(short, constant(1), "plateau_nvme_available_spare_ratio", d...)
		add(short, constant(0.1), "plateau_nvme_available_spare_threshold_ratio", d...)
		add(short, constant(0.04), "plateau_nvme_percentage_used_ratio", d...)
		add(ctr, constant(0), "plateau_nvme_media_errors_total", d...)
	}

	for _, c := range []string{"gpfs", "infiniband", "nfs", "nvme"} {
		add(short, constant(1), "plateau_scrape_collector_success", "collector", c)
	}
	add(short, constant(1), "plateau_config_last_reload_successful")
	add(short, constant(1), "plateau_baselines_last_load_successful")
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func main() {
	nodes := flag.Int("nodes", 5000, "nodes node0001..nodeNNNN")
	end := flag.Int64("end", time.Now().Unix(), "timestamp of the last sample, unix seconds")
	step := flag.Duration("step", time.Minute, "scrape interval of the synthetic data")
	history := flag.Duration("history", 6*time.Hour+15*time.Minute, "history of the series read over 6h ranges")
	long := flag.Duration("long", 0, "history of the series read over 1d ranges (default -history)")
	short := flag.Duration("short", 10*time.Minute, "history of the series read only at the instant")
	block := flag.Duration("block", 2*time.Hour, "promtool's block duration: one output file per block window")
	outDir := flag.String("out", ".", "directory of the output files")
	head := flag.Duration("head", 0, "leave the samples of this last span before -end out of the files (0: none); with -remote-write, send only those")
	remote := flag.String("remote-write", "", "URL of a Prometheus remote-write receiver: send the -head span there instead of writing files")
	flag.Parse()
	if *long == 0 {
		*long = *history
	}
	g := gen{end: *end, step: int64(step.Seconds()), history: int64(history.Seconds()), long: int64(long.Seconds()),
		counter: 65 * 60, short: int64(short.Seconds()), head: int64(head.Seconds())}
	g.epoch = g.end - 30*86400
	var st stats
	var err error
	if *remote != "" {
		if g.head <= 0 {
			fmt.Fprintln(os.Stderr, "fleetgen: -remote-write needs -head")
			os.Exit(2)
		}
		st, err = g.remoteWrite(*nodes, *remote)
	} else {
		st, err = g.write(*nodes, int64(block.Seconds()), *outDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetgen:", err)
		os.Exit(1)
	}
	fmt.Printf("nodes=%d series=%d samples=%d files=%d\n", *nodes, st.series, st.samples, st.files)
}

type stats struct{ series, samples, files int64 }

// at is the first sample time at or after t: samples sit on multiples of
// step, ending at end.
func (g gen) at(t int64) int64 { return g.end - floorDiv(g.end-t, g.step)*g.step }

func (g gen) write(nodes int, block int64, dir string) (stats, error) {
	var st stats
	all := make([][]series, nodes)
	first := g.end
	for i := range all {
		all[i] = g.nodeSeries(newNode(i + 1))
		for _, s := range all[i] {
			first = min(first, s.from)
		}
	}
	st.series = int64(len(all) * len(all[0]))
	last := g.end // the last timestamp written to the files
	if g.head > 0 {
		last = g.end - g.head
	}
	for w := floorDiv(first*1000, block*1000) * block; w <= last; w += block {
		name := filepath.Join(dir, fmt.Sprintf("fleet-%d.om", w))
		f, err := os.Create(name)
		if err != nil {
			return st, err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		var buf []byte
		for _, ss := range all {
			for _, s := range ss {
				prefix := labels(s.name, s.kv...)
				from := max(s.from, w)
				for t := g.at(from); t < w+block && t <= last; t += g.step {
					v := s.value(t)
					if !s.sampled(t, g.step) || math.IsNaN(v) {
						continue
					}
					buf = append(buf[:0], prefix...)
					buf = strconv.AppendFloat(buf, v, 'g', -1, 64)
					buf = append(buf, ' ')
					buf = strconv.AppendInt(buf, t, 10)
					buf = append(buf, '\n')
					bw.Write(buf)
					st.samples++
				}
			}
		}
		bw.WriteString("# EOF\n")
		if err := bw.Flush(); err != nil {
			return st, err
		}
		if err := f.Close(); err != nil {
			return st, err
		}
		st.files++
	}
	return st, nil
}

// remoteWrite sends every series' samples after end-head, up to end, to a
// Prometheus remote-write receiver (Prometheus's --web.enable-remote-write-receiver),
// a batch of series per request with all of their samples, from two
// senders at once. Samples later than the wall clock are accepted by the
// head and become visible to queries as time passes, as a scrape's would.
func (g gen) remoteWrite(nodes int, url string) (stats, error) {
	var st stats
	from := g.end - g.head + 1
	const batchNodes = 10
	type batch struct{ lo, hi int }
	work := make(chan batch)
	errs := make(chan error, 2)
	var mu sync.Mutex
	client := &http.Client{Timeout: 5 * time.Minute}
	send := func() {
		for b := range work {
			var req prompb.WriteRequest
			var n, samples int64
			for i := b.lo; i < b.hi; i++ {
				for _, s := range g.nodeSeries(newNode(i + 1)) {
					ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: s.name}}}
					for j := 0; j+1 < len(s.kv); j += 2 {
						ts.Labels = append(ts.Labels, prompb.Label{Name: s.kv[j], Value: s.kv[j+1]})
					}
					sort.Slice(ts.Labels, func(a, b int) bool { return ts.Labels[a].Name < ts.Labels[b].Name })
					for t := g.at(max(s.from, from)); t <= g.end; t += g.step {
						if v := s.value(t); s.sampled(t, g.step) && !math.IsNaN(v) {
							ts.Samples = append(ts.Samples, prompb.Sample{Value: v, Timestamp: t * 1000})
						}
					}
					samples += int64(len(ts.Samples))
					n++
					req.Timeseries = append(req.Timeseries, ts)
				}
			}
			raw, err := req.Marshal()
			if err == nil {
				err = post(client, url, snappy.Encode(nil, raw))
			}
			if err != nil {
				errs <- fmt.Errorf("nodes %d..%d: %w", b.lo+1, b.hi, err)
				for range work {
				}
				return
			}
			mu.Lock()
			st.series += n
			st.samples += samples
			mu.Unlock()
		}
		errs <- nil
	}
	go send()
	go send()
	for lo := 0; lo < nodes; lo += batchNodes {
		work <- batch{lo, min(nodes, lo+batchNodes)}
	}
	close(work)
	err := errors.Join(<-errs, <-errs)
	return st, err
}

func post(client *http.Client, url string, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("remote write: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
