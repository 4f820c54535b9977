package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/characterize/slurm"
	"github.com/plateau-exporter/plateau_exporter/probe/engine"
)

// runFleetCharacterize is characterize --slurm: it reads the allocation
// from Slurm's environment and hands over to slurm.FleetCharacterizer.
func runFleetCharacterize(w io.Writer, logger log.Logger, o characterizeOptions) error {
	switch {
	case o.maxWorkers < 1:
		return exitErr(2, fmt.Errorf("--max-workers must be at least 1, got %d", o.maxWorkers))
	case o.sample < 0:
		return exitErr(2, fmt.Errorf("--sample must not be negative, got %d", o.sample))
	case o.sweepRuns < 1:
		return exitErr(2, fmt.Errorf("--sweep-runs must be at least 1, got %d", o.sweepRuns))
	case o.runs < 1:
		return exitErr(2, fmt.Errorf("--runs must be at least 1, got %d", o.runs))
	case o.startDelay <= 0:
		return exitErr(2, fmt.Errorf("--slurm.start-delay must be positive, got %s", o.startDelay))
	case o.outputDir == "":
		return exitErr(2, fmt.Errorf("--slurm needs --output-dir for its charts, steps, rule file and baselines"))
	}
	nodelist := os.Getenv("SLURM_JOB_NODELIST")
	if os.Getenv("SLURM_JOB_ID") == "" || nodelist == "" {
		return exitErr(2, fmt.Errorf("--slurm runs inside a Slurm allocation (salloc or sbatch): SLURM_JOB_ID and SLURM_JOB_NODELIST are not set"))
	}
	out, err := exec.Command(o.scontrol, "show", "hostnames", nodelist).Output()
	if err != nil {
		return exitErr(2, fmt.Errorf("%s show hostnames %s: %w", o.scontrol, nodelist, err))
	}
	nodes := strings.Fields(string(out))
	cfg, err := loadConfig(o.configFile)
	if err != nil {
		return exitErr(2, err)
	}
	refs, err := selectProbes(cfg, o.targets, o.probes)
	if err != nil {
		return exitErr(2, err)
	}
	self, err := os.Executable()
	if err != nil {
		return exitErr(2, fmt.Errorf("path of this executable, for the tasks: %w", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fc := &slurm.FleetCharacterizer{
		Self: self,
		Run:  slurm.ExecSrun(o.srun, os.Stderr),
		Open: func(t *probe.Target) (slurm.Steps, error) {
			return engine.OpenSlurmSession(t, o.hostname)
		},
		Hostname:   o.hostname,
		Nodes:      nodes,
		MaxWorkers: o.maxWorkers,
		StepRuns:   o.sweepRuns,
		StartDelay: o.startDelay,
		Sample:     o.sample,
		SampleRuns: o.runs,
		Log:        func(format string, args ...any) { fmt.Fprintf(w, format, args...) },
	}
	fmt.Fprintf(w, "fleet characterization of %d probe(s) on %d node(s) of job %s: workers %v, %d run(s) per step\n", len(refs), len(nodes), os.Getenv("SLURM_JOB_ID"), fc.Levels(), o.sweepRuns)
	rep, runErr := fc.Characterize(ctx, refs)
	if rep == nil {
		return exitErr(2, runErr)
	}
	rep.WriteTable(w)
	ff, err := rep.WriteFiles(o.outputDir, o.rulesFile, o.baselinesFile)
	for _, p := range ff.SVGs {
		fmt.Fprintf(w, "chart: %s\n", p)
	}
	if ff.CSV != "" {
		fmt.Fprintf(w, "steps: %s\n", ff.CSV)
	}
	if ff.Rules != "" {
		fmt.Fprintf(w, "recording rules: %s (add to Prometheus's rule_files)\n", ff.Rules)
	}
	if ff.Baselines != "" {
		kept := ""
		if ff.Backup != "" {
			kept = fmt.Sprintf(" (the previous file is kept as %s)", ff.Backup)
		}
		fmt.Fprintf(w, "node-class baselines: %s%s (install as baselines_file on every node of the class)\n", ff.Baselines, kept)
	}
	if err := errors.Join(runErr, err); err != nil {
		return exitErr(2, err)
	}
	return nil
}

// runSlurmTask is the hidden slurm-task command: one task of a fleet step,
// started by srun. It reads the step's request from the environment and
// its index from SLURM_PROCID, runs its share and prints its result line;
// a failed share is reported in the line (exit status 0), so that the
// coordinator names the task. Only a task that cannot tell who it is exits
// non-zero.
func runSlurmTask(logger log.Logger) error {
	raw := os.Getenv(probe.SlurmTaskEnv)
	if raw == "" {
		return exitErr(2, fmt.Errorf("%s is not set: slurm-task is started by characterize --slurm through srun", probe.SlurmTaskEnv))
	}
	task, err := strconv.Atoi(os.Getenv("SLURM_PROCID"))
	if err != nil {
		return exitErr(2, fmt.Errorf("SLURM_PROCID: %w", err))
	}
	node := os.Getenv("SLURMD_NODENAME")
	if node == "" {
		node, _ = os.Hostname()
	}
	var req probe.SlurmTaskRequest
	var res *probe.SlurmTaskResult
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		res = &probe.SlurmTaskResult{Task: task, Node: node, Error: fmt.Sprintf("%s: %v", probe.SlurmTaskEnv, err)}
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		res = engine.RunSlurmTask(ctx, req, task, node)
	}
	if res.Error != "" {
		level.Warn(logger).Log("msg", "slurm task failed", "task", task, "node", node, "err", res.Error)
	}
	js, err := json.Marshal(res)
	if err != nil {
		return exitErr(2, err)
	}
	_, err = fmt.Fprintf(os.Stdout, "%s%s\n", probe.SlurmTaskLinePrefix, js)
	return err
}
