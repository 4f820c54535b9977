package store

// The descriptors of the probe metrics, declared once: every series the
// store exports, its name, help and labels, and Describe. store.go records
// the values and collect.go copies them out.

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// namespace prefixes every metric of the exporter.
const namespace = "plateau"

// newDesc is the descriptor of plateau_<subsystem>_<name>: every series of
// the store is one, with variable labels only.
func newDesc(subsystem, name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, nil)
}

var (
	probeLabels   = []string{"target", "probe", "kind"}
	probeOpLabels = []string{"target", "probe", "kind", "op"}

	descSuccess     = newDesc("probe", "success", "1 if the last run of the probe completed and measured, 0 if it failed or timed out.", probeLabels)
	descLastRun     = newDesc("probe", "last_run_timestamp_seconds", "Unix time at which the last run of the probe ended, successful or not.", probeLabels)
	descLastSuccess = newDesc("probe", "last_success_timestamp_seconds", "Unix time at which the last successful run of the probe ended.", probeLabels)
	descDuration    = newDesc("probe", "duration_seconds", "Wall time of the last run of the probe, in seconds, including set-up and clean-up.", probeLabels)
	// Interval between runs of the probe, in seconds: as configured, or as
	// the target's fleet budget stretched it (fleet.max_bytes_per_hour).
	descInterval   = newDesc("probe", "interval_seconds", "Interval between runs of the probe, as configured or stretched by the fleet budget, in seconds.", probeLabels)
	descInProgress = newDesc("probe", "in_progress", "1 while a run of the probe is going on.", probeLabels)
	// How the last successful run did its I/O: direct is true when O_DIRECT
	// was used, engine names how requests were issued.
	descInfo = newDesc("probe", "info", "How the last successful run of the probe did its I/O: direct (O_DIRECT) and engine.", []string{"target", "probe", "kind", "direct", "engine"})
	// Data moved per second by the op in the last successful run, in bytes
	// per second (close and fsync included).
	descThroughput = newDesc("probe", "throughput_bytes_per_second", "Bytes per second the op moved in the last successful run, close and fsync included.", probeOpLabels)
	// Operations per second of the op in the last successful run (I/O
	// requests for data probes, syscalls for metadata).
	descOpsRate = newDesc("probe", "operations_per_second", "Operations per second of the op in the last successful run.", probeOpLabels)
	// Latency of each operation (one I/O request or one metadata syscall) of
	// the op, over all runs since start, in seconds.
	descLatency = newDesc("probe", "latency_seconds", "Latency of each I/O request or metadata syscall of the op, in seconds.", probeOpLabels)
	descRuns    = newDesc("probe", "runs_total", "Runs of the probe by result: success, failure, timeout, skipped.", append(probeLabels[:3:3], "result"))
	// Failed runs of the probe by reason, from errno: enospc, eio, eacces,
	// erofs, estale, edquot, enoent, timeout, unsafe, other.
	descErrors = newDesc("probe", "errors_total", "Failed runs of the probe by reason.", append(probeLabels[:3:3], "reason"))
	// Skipped runs of the probe by reason: overlap, target_busy,
	// target_hung, min_free, budget, job_running (a Slurm job held the
	// node).
	descSkips = newDesc("probe", "skips_total", "Skipped runs of the probe by reason.", append(probeLabels[:3:3], "reason"))
	// Bytes the probe's runs moved to or from the file system, by op: the
	// load plateau_exporter itself puts on storage.
	descIOBytes = newDesc("probe", "io_bytes_total", "Bytes the probe's runs moved to or from the file system, by op.", probeOpLabels)
	// Bytes per second this node moved on the probed file system during the
	// last successful run apart from the probe's own, by op (read, write): a
	// slow run on a node busy with its own jobs' I/O. From /proc/diskstats
	// for a local block device (the whole partition), /proc/self/mountstats
	// for NFS (bytes to and from the server), and for GPFS mmpmon fs_io_s as
	// the gpfs collector last read it in the background: its resolution is
	// --collector.gpfs.interval, coarse for runs shorter than that and
	// absent when no new answer came during the run. Absent when no source
	// applies (tmpfs, overlay, FUSE) or while the probe fails.
	descConcurrent = newDesc("probe", "concurrent_bytes_per_second", "Bytes per second of the node's own I/O on the probed file system during the last successful run.", probeOpLabels)
	// One series per target instead of one per probe op, for the fleet
	// rule that subtracts the probes' own traffic from a node's (rules.yml).
	//
	// Bytes all probes of the target moved to or from the file system since
	// the exporter started: the sum of the target's
	// plateau_probe_io_bytes_total, counting probes a reload has since
	// removed too.
	descTargetIOBytes = newDesc("probe", "target_io_bytes_total", "Bytes all probes of the target moved to or from the file system.", []string{"target"})
	// 1 while a worker of the target ignores SIGKILL (stuck on the file
	// system); no probe starts on the target until it exits.
	descHung          = newDesc("probe", "hung", "1 while a worker of the target ignores SIGKILL, stuck on the file system, else 0.", []string{"target"})
	descAbandoned     = newDesc("probe", "abandoned_workers", "Workers of the target killed at their timeout that have not exited yet.", []string{"target"})
	descBaselineBytes = newDesc("baseline", "throughput_bytes_per_second", "The op's plateau: throughput the same probe reached on a known-good system, in bytes per second.", probeOpLabels)
	descBaselineOps   = newDesc("baseline", "operations_per_second", "The op's plateau: operation rate the same probe reached on a known-good system, per second.", probeOpLabels)
	// Last successful result of the op divided by its baseline (1 = at
	// plateau); absent without a baseline, while the probe fails, or while
	// its I/O mode differs from the baseline's.
	descRatio = newDesc("probe", "ratio", "Last successful result of the op divided by its baseline (1 = at plateau).", probeOpLabels)
	// 1 when the last successful run did its I/O differently (direct, engine
	// of plateau_probe_info) from the runs its baseline was measured with;
	// its ratio is then not exported. Present once a probe with a baseline
	// has succeeded.
	descModeMismatch = newDesc("baseline", "io_mode_mismatch", "1 when the last successful run did its I/O differently from its baseline's runs, else 0.", probeLabels)
	// Ratio to baseline below which the probe's results are a warning or
	// critical regression (the target's warning_ratio and critical_ratio).
	descThreshold = newDesc("alert", "threshold_ratio", "Ratio to baseline below which the probe's results are a warning or critical regression.", []string{"target", "probe", "severity"})
	// The op's last plateau.ChangeRuns results' geometric mean divided by the
	// probe's recent normal, the median of that mean over the plateau.NormalRuns
	// runs before them (1 = as usual, 0.5 = half). Absent until the probe has
	// minChangeRuns successful runs.
	descChange = newDesc("probe", "change_ratio", fmt.Sprintf("Geometric mean of the op's last %d results divided by the probe's recent normal.", plateau.ChangeRuns), probeOpLabels)
	// How much the change ratio's mean moves on its own: 1.4826 x the median
	// absolute deviation of its natural log over the same plateau.NormalRuns
	// runs, about its relative standard deviation.
	descChangeNoise = newDesc("probe", "change_noise_ratio", fmt.Sprintf("Robust relative spread of the op's %d-run mean over the %d runs before it.", plateau.ChangeRuns, plateau.NormalRuns), probeOpLabels)
	// The statistic the sudden-regression verdict pages on: fully down after
	// plateau.FastRuns runs of a drop.
	descChangeFast      = newDesc("probe", "change_fast_ratio", fmt.Sprintf("The same as plateau_probe_change_ratio over the op's last %d results.", plateau.FastRuns), probeOpLabels)
	descChangeFastNoise = newDesc("probe", "change_fast_noise_ratio", fmt.Sprintf("How much that %d-run mean moves on its own, as plateau_probe_change_noise_ratio.", plateau.FastRuns), probeOpLabels)
	// At most plateau.MaxLowRuns. The verdict asks for 2, so that one slow run
	// never pages.
	descChangeLowRuns = newDesc("probe", "change_low_runs", fmt.Sprintf("Latest runs of the op in a row each below the median of the %d runs before it.", plateau.NormalRuns), probeOpLabels)
	// The verdict is plateau.Change.Regression of the plateau_probe_change_*
	// statistics: the op's last plateau.FastRuns runs' mean under its recent
	// normal by more than plateau.PageNoiseFactor times its noise (clamped to
	// plateau.PageMinDrop..PageMaxDrop) with both runs below normal, or its
	// last plateau.ChangeRuns runs' mean so with the latest run below normal
	// and the fast mean under plateau.SlowPageFastRatio of normal. Computed
	// once per run; absent while plateau_probe_change_ratio is.
	descRegression = newDesc("probe", "regression", "1 when the op is in sudden regression, the verdict that pages, else 0.", probeOpLabels)
	// plateau_probe_ratio steadied over the last runs, counted in runs whatever
	// the probe's interval. Absent where plateau_probe_ratio is.
	descMedianRecent = newDesc("probe", "ratio_median_3_runs", fmt.Sprintf("Median of the op's last %d successful results divided by its baseline.", plateau.RecentMedianRuns), probeOpLabels)
	// The chronic shortfall's measure, which one bad evening cannot move.
	// Absent where plateau_probe_ratio is, and until the op has
	// plateau.MinLongMedianRuns successful runs with the probe's current
	// parameters.
	descMedianLong = newDesc("probe", "ratio_median_24_runs", fmt.Sprintf("Median of the op's last %d successful results divided by its baseline.", plateau.LongMedianRuns), probeOpLabels)
	// The fleet rules count nodes per target: reading these, a series per
	// node and target, instead of every op's verdict, makes them
	// read a twentieth of the series on the default config's fleet.
	//
	// 1 when any op of any probe of the target is in sudden regression (the
	// maximum of the target's plateau_probe_regression), else 0; absent
	// while none of them has a plateau_probe_regression.
	descTargetRegression = newDesc("probe", "target_regression", "1 when any op of any probe of the target is in sudden regression, else 0.", []string{"target"})
	// The node's evidence for the file-system page (plateau.LowScore), one
	// per node and target like the verdicts above: the fleet rules
	// add it up over a target's nodes, where one series per op would have
	// them read twenty times as many. The ops combined as
	// plateau.TargetScore says (sum over √k, bounded, and within the most
	// extreme op's): one odd op of a node does not stand for its whole view
	// of the file system, a fault that lowers only some ops (reads) still
	// counts in full for them, and ops that fall together count once.
	//
	// Each op's low score is how far below its own normal its latest run is,
	// in that op's own run-to-run robust deviations (1.4826 x the median
	// absolute deviation of the plateau.NormalRuns runs before it), bounded to
	// ±plateau.ScoreBound; negative is below normal. The target's score adds
	// them up over the square root of their number, bounded again and to
	// the most extreme op's score. The fleet
	// rules add it up across the target's nodes
	// (target:plateau_probe_low_score:evidence). Absent while no op of the
	// target has one (until MinNormalRuns+ScoreRuns successful runs).
	descTargetLowScore = newDesc("probe", "target_low_score", fmt.Sprintf("Combined low score of the target's ops in robust deviations from normal, bounded to ±%d.", plateau.ScoreBound), []string{"target"})
	// Beside the score, the size of the drop (plateau.NormalRatio): the
	// latest run of the target's lowest op over its recent normal, the
	// median of the plateau.NormalRuns runs before it. The score says how
	// sure a drop is, this how large; the file-system page asks for both
	// (target:plateau_probe_normal_ratio:median), so that a fleet of very
	// steady nodes all 5% low, many deviations each, is not a page. The
	// lowest op, so that a fault of some ops (reads) counts in full.
	// Present with plateau_probe_target_low_score.
	descTargetNormalRatio = newDesc("probe", "target_normal_ratio", "Latest run of the target's lowest op over its recent normal (the median of the runs before it).", []string{"target"})
	// 1 when any op of any probe of the target has its
	// plateau_probe_ratio_median_3_runs under its probe's warning threshold
	// (plateau_alert_threshold_ratio{severity="warning"}), else 0; absent
	// while none of them has a plateau_probe_ratio_median_3_runs.
	descTargetBelowWarning = newDesc("probe", "target_below_warning", "1 when any op of the target has its 3-run median ratio under the warning threshold, else 0.", []string{"target"})
	// 1 when any op of any probe of the target has its
	// plateau_probe_ratio_median_24_runs under its probe's warning threshold
	// (plateau_alert_threshold_ratio{severity="warning"}), the chronic
	// shortfall PlateauProbeBelowPlateau warns of, else 0; absent while none
	// of them has a plateau_probe_ratio_median_24_runs.
	descTargetBelowPlateau = newDesc("probe", "target_below_plateau", "1 when any op of the target has its 24-run median ratio under the warning threshold, else 0.", []string{"target"})
	// Per target, what the cause and exporter rules read instead of every
	// probe's series: at 5,000 nodes of packaging/plateau.yml a
	// rule over a series per probe or per probe op reads 35,000 to
	// 100,000 series at each evaluation, over one per target 10,000.
	//
	// 1 when, during the last successful run of any probe of the target, the
	// node moved more bytes per second of its own on the file system for an op
	// (plateau_probe_concurrent_bytes_per_second) than ConcurrentBusyFraction
	// times that probe's throughput plateau for the op
	// (plateau_baseline_throughput_bytes_per_second): the node was busy with
	// its jobs' I/O; absent while no probe of the target has both.
	descTargetConcurrentBusy = newDesc("probe", "target_concurrent_busy", fmt.Sprintf("1 when the node's own I/O during a probe's last run of the target exceeded %g of its plateau, else 0.", ConcurrentBusyFraction), []string{"target"})
	descTargetFailing        = newDesc("probe", "target_failing_probes", "How many probes of the target have plateau_probe_failing 1.", []string{"target"})
	descTargetNotRun         = newDesc("probe", "target_not_run_probes", "How many probes of the target have plateau_probe_not_run 1.", []string{"target"})
	// How many probes of the target have plateau_baseline_io_mode_mismatch
	// 1; absent while none of them has a plateau_baseline_io_mode_mismatch.
	descTargetModeMismatch = newDesc("baseline", "target_io_mode_mismatch_probes", "Probes of the target whose plateau_baseline_io_mode_mismatch is 1.", []string{"target"})
	// Fails for good: its last run failed or timed out and its last success is
	// more than failingIntervals of its intervals old, or it has not succeeded
	// since the exporter started and failed or timed out failingRuns times.
	// Evaluated at each scrape on the exporter's clock.
	descFailing = newDesc("probe", "failing", "1 when the probe fails for good, not for one run, else 0.", probeLabels)
	// 1 when the probe's last run ended more than notRunIntervals of its
	// intervals ago, or, not having run since the exporter started, it was
	// skipped notRunSkips times. Evaluated at each scrape on the exporter's
	// clock.
	descNotRun = newDesc("probe", "not_run", "1 when the probe has not run for longer than it should have, else 0.", probeLabels)
	// Which data server a target measures, for the rule that names the
	// slow server of a group (PlateauServerSlow); only targets made by a
	// servers list have one.
	//
	// 1 for each target made by a target's servers list (its directory
	// pinned to one data server: an OST, NSD server, chunkserver or storage
	// target): server is that server, server_group the name of the
	// configured target. Absent for other targets.
	descTargetServerInfo = newDesc("target", "server_info", "The data server and server group of a target made by a servers list; always 1.", []string{"target", "server_group", "server"})
	// Which file system a storage server's own target serves, for the
	// file-system page to name the servers whose own probes fell with it
	// (rules.yml, target_instance:plateau_server_regression:max). A
	// target with serves: is a storage server's own target (its data
	// device); other targets have no series.
	descTargetServesInfo = newDesc("target", "serves_info", "The clients' target of the file system this storage server's own target serves; always 1.", []string{"target", "serves"})
	// 1 if the history file of the change ratios (--probe.history-file) was
	// loaded at start, or none is configured; 0 if it could not be read or
	// was corrupt: it was set aside as <file>.corrupt-* and the change
	// ratios start anew.
	descHistoryLoaded = newDesc("probe", "history_last_load_successful", "1 if the change ratios' history file was loaded at start or none is configured, else 0.", nil)
	// Failed writes of the history file of the change ratios
	// (--probe.history-file); the reason is in the log. Until a write
	// succeeds, a restart loses the runs since the last one.
	descHistoryWriteErrors = newDesc("probe", "history_write_errors_total", "Failed writes of the change ratios' history file (--probe.history-file).", nil)
)

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSuccess, descLastRun, descLastSuccess, descDuration, descInterval, descInProgress, descInfo,
		descThroughput, descOpsRate, descConcurrent, descLatency, descRuns, descErrors, descSkips, descIOBytes, descTargetIOBytes, descHung, descAbandoned,
		descBaselineBytes, descBaselineOps, descRatio, descModeMismatch, descThreshold,
		descChange, descChangeNoise, descChangeFast, descChangeFastNoise, descChangeLowRuns,
		descRegression, descMedianRecent, descMedianLong, descTargetRegression, descTargetLowScore, descTargetNormalRatio, descTargetBelowWarning, descTargetBelowPlateau,
		descTargetConcurrentBusy, descTargetFailing, descTargetNotRun, descTargetModeMismatch,
		descFailing, descNotRun, descTargetServerInfo, descTargetServesInfo, descHistoryLoaded, descHistoryWriteErrors} {
		ch <- d
	}
}
