package slurm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// A fleet step's value is aggregated from what its tasks report, as IOR
// and mdtest aggregate their ranks:
//
//   - Aggregate is the total moved (bytes, or metadata operations) over the
//     span from the first task's start to the last task's end: IOR's
//     aggregate bandwidth, mdtest's rate. One slow node stretches the span
//     and pulls the whole step down, which is what an application that
//     waits for its slowest rank sees.
//   - Stonewalled is what all tasks had moved by the moment the first task
//     finished its share, over the span from the first start to that
//     moment: the rate the file system delivered while every task was still
//     running, as IOR's stonewalling measures it (-D stops every rank at a
//     deadline). Here no task is stopped; each reports samples of its
//     progress (about 64 per op) and its amount at the stonewall is
//     interpolated between them, so one run gives both values and a
//     straggler shows as the gap between them rather than hiding in one
//     number. A task without samples (the metadata kind reports only each
//     op's start and end) counts as progressing evenly over its op.
//
// Late starters are tasks that got to the start barrier after its time
// (srun launched them too late, or their preparation took longer);
// stragglers are tasks that took more than StragglerFactor times the
// median task's time. Both are reported, never dropped: the step's value
// includes them.

// StragglerFactor is how much longer than the median task a task must
// take to count as a straggler.
const StragglerFactor = 1.5

// LateTolerance is how far past the start barrier a task may arrive and
// still count as on time (timer and scheduling jitter).
const LateTolerance = 50 * time.Millisecond

// ParseTaskResults reads the task result lines of one srun's stdout: lines
// starting with probe.SlurmTaskLinePrefix, each one JSON object. Other
// lines are not results and are skipped. A result line that does not
// parse, or names a task outside 0..tasks-1 or one already seen, is an
// error naming its line; a task with no line is an error naming the task.
// The results come back in task order.
func ParseTaskResults(out []byte, tasks int) ([]*probe.SlurmTaskResult, error) {
	if tasks < 1 {
		return nil, fmt.Errorf("want at least one task, got %d", tasks)
	}
	got := make([]*probe.SlurmTaskResult, tasks)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	line := 0
	var errs []error
	for sc.Scan() {
		line++
		text, ok := strings.CutPrefix(sc.Text(), probe.SlurmTaskLinePrefix)
		if !ok {
			continue
		}
		var r probe.SlurmTaskResult
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			errs = append(errs, fmt.Errorf("line %d: task result: %w", line, err))
			continue
		}
		if dec.More() {
			errs = append(errs, fmt.Errorf("line %d: task %d: text after the result", line, r.Task))
			continue
		}
		switch {
		case r.Task < 0 || r.Task >= tasks:
			errs = append(errs, fmt.Errorf("line %d: task %d is not one of the step's %d tasks", line, r.Task, tasks))
		case got[r.Task] != nil:
			errs = append(errs, fmt.Errorf("line %d: task %d reported twice", line, r.Task))
		default:
			if err := checkTaskResult(&r); err != nil {
				errs = append(errs, fmt.Errorf("line %d: task %d on %s: %w", line, r.Task, nodeName(r.Node), err))
				continue
			}
			got[r.Task] = &r
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("line %d: %w", line+1, err))
	}
	var missing []string
	for i, r := range got {
		if r == nil {
			missing = append(missing, fmt.Sprint(i))
		}
	}
	if len(missing) > 0 {
		if len(missing) > 10 {
			missing = append(missing[:10], fmt.Sprintf("... (%d in all)", len(missing)))
		}
		errs = append(errs, fmt.Errorf("no result from task(s) %s of %d", strings.Join(missing, ", "), tasks))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return got, nil
}

func nodeName(n string) string {
	if n == "" {
		return "an unnamed node"
	}
	return n
}

// checkTaskResult refuses a result that cannot be aggregated.
func checkTaskResult(r *probe.SlurmTaskResult) error {
	if r.Error != "" {
		return fmt.Errorf("failed: %s", r.Error)
	}
	if r.Phase == probe.SlurmPhaseProbe {
		if r.Result == nil {
			return fmt.Errorf("no probe result")
		}
		return nil
	}
	if len(r.Ops) == 0 {
		return fmt.Errorf("no ops")
	}
	seen := map[string]bool{}
	for _, o := range r.Ops {
		switch {
		case o.Op == "":
			return fmt.Errorf("an op without a name")
		case seen[o.Op]:
			return fmt.Errorf("op %s twice", o.Op)
		case o.Done < 0:
			return fmt.Errorf("op %s: negative amount %d", o.Op, o.Done)
		case o.Start.IsZero() || o.End.Before(o.Start):
			return fmt.Errorf("op %s: end %s before start %s", o.Op, o.End.Format(time.RFC3339Nano), o.Start.Format(time.RFC3339Nano))
		}
		seen[o.Op] = true
		last := probe.SlurmProgress{}
		for _, p := range o.Progress {
			if !(p.S >= last.S) || p.Done < last.Done || p.Done > o.Done || math.IsInf(p.S, 0) {
				return fmt.Errorf("op %s: progress sample (%gs, %d) does not follow (%gs, %d) within the op's %d", o.Op, p.S, p.Done, last.S, last.Done, o.Done)
			}
			last = p
		}
	}
	return nil
}

// LateTask is a task that missed the start barrier.
type LateTask struct {
	Task int
	Node string
	// By is how long after the barrier it arrived.
	By time.Duration
}

// StepOp is one op of a fleet step, aggregated over its tasks.
type StepOp struct {
	Op    string
	Tasks int
	Nodes int
	// Done is the tasks' total: bytes for the data kinds, operations for
	// metadata.
	Done int64
	// Span runs from the first task's start to the last task's end.
	First, Last time.Time
	Span        time.Duration
	// Aggregate is Done / Span.
	Aggregate float64
	// Stonewall is when the first task finished; StonewallDone what all
	// tasks had done by then and Stonewalled that over the time from
	// First to Stonewall.
	Stonewall     time.Time
	StonewallDone float64
	Stonewalled   float64
	// Late are the tasks that missed the barrier, Stragglers the tasks
	// that took over StragglerFactor times the median task's time.
	Late       []LateTask
	Stragglers []int
}

// AggregateStep aggregates the ops of one srun's task results (in task
// order, as ParseTaskResults returns them). startAt is the barrier the
// tasks were given. Every task must report the same ops.
func AggregateStep(results []*probe.SlurmTaskResult, startAt time.Time) ([]StepOp, error) {
	if len(results) == 0 {
		return nil, fmt.Errorf("no task results")
	}
	nodes := map[string]bool{}
	var late []LateTask
	for _, r := range results {
		nodes[r.Node] = true
		if by := r.Arrived.Sub(startAt); by > LateTolerance {
			late = append(late, LateTask{Task: r.Task, Node: r.Node, By: by})
		}
	}
	var out []StepOp
	for _, first := range results[0].Ops {
		ops := make([]probe.SlurmTaskOp, len(results))
		for i, r := range results {
			o, ok := findOp(r.Ops, first.Op)
			if !ok {
				return nil, fmt.Errorf("task %d on %s reported no %s op", r.Task, nodeName(r.Node), first.Op)
			}
			ops[i] = o
		}
		so := aggregateOp(first.Op, ops)
		so.Nodes, so.Late = len(nodes), late
		out = append(out, so)
	}
	for _, r := range results[1:] {
		if len(r.Ops) != len(results[0].Ops) {
			return nil, fmt.Errorf("task %d on %s reported %d ops, task %d %d", r.Task, nodeName(r.Node), len(r.Ops), results[0].Task, len(results[0].Ops))
		}
	}
	return out, nil
}

func findOp(ops []probe.SlurmTaskOp, name string) (probe.SlurmTaskOp, bool) {
	for _, o := range ops {
		if o.Op == name {
			return o, true
		}
	}
	return probe.SlurmTaskOp{}, false
}

func aggregateOp(name string, ops []probe.SlurmTaskOp) StepOp {
	so := StepOp{Op: name, Tasks: len(ops), First: ops[0].Start, Last: ops[0].End, Stonewall: ops[0].End}
	durs := make([]float64, len(ops))
	for i, o := range ops {
		so.Done += o.Done
		if o.Start.Before(so.First) {
			so.First = o.Start
		}
		if o.End.After(so.Last) {
			so.Last = o.End
		}
		if o.End.Before(so.Stonewall) {
			so.Stonewall = o.End
		}
		durs[i] = o.End.Sub(o.Start).Seconds()
	}
	so.Span = so.Last.Sub(so.First)
	if s := so.Span.Seconds(); s > 0 {
		so.Aggregate = float64(so.Done) / s
	}
	for _, o := range ops {
		so.StonewallDone += doneAt(o, so.Stonewall)
	}
	if s := so.Stonewall.Sub(so.First).Seconds(); s > 0 {
		so.Stonewalled = so.StonewallDone / s
	}
	med := plateau.Median(durs)
	for i, d := range durs {
		if d > StragglerFactor*med {
			so.Stragglers = append(so.Stragglers, i)
		}
	}
	return so
}

// doneAt is how much of o was done at t, interpolated linearly between its
// progress samples, from 0 at its start to all of it at its end.
func doneAt(o probe.SlurmTaskOp, t time.Time) float64 {
	if !t.After(o.Start) {
		return 0
	}
	if !t.Before(o.End) {
		return float64(o.Done)
	}
	at := t.Sub(o.Start).Seconds()
	prevS, prevD := 0.0, 0.0
	pts := append(append([]probe.SlurmProgress(nil), o.Progress...), probe.SlurmProgress{S: o.End.Sub(o.Start).Seconds(), Done: o.Done})
	for _, p := range pts {
		if p.S >= at {
			if p.S == prevS {
				return float64(p.Done)
			}
			return prevD + (float64(p.Done)-prevD)*(at-prevS)/(p.S-prevS)
		}
		prevS, prevD = p.S, float64(p.Done)
	}
	return float64(o.Done)
}

// ReadShift is the shift of a read phase: task i reads what task
// (i + shift) mod n wrote. IOR's -C shifts by the tasks per node, which
// under IOR's block layout (a node's tasks numbered together) is the
// first task of the next node. srun --distribution=cyclic numbers the
// other way round (task i on node i mod nodes), so the same shift can land
// on the same node (16 tasks per node on 16 nodes: i + 16 is on i's node).
// ReadShift therefore takes the smallest shift that moves every task to
// another node by the layout the write phase reported (node[i] is task
// i's node), so that no client reads data its own cache holds. With one
// node there is none, and the shift is 1: another task's data, from the
// same node.
func ReadShift(node []string) int {
	n := len(node)
	for s := 1; s < n; s++ {
		ok := true
		for i := range node {
			if node[i] == node[(i+s)%n] {
				ok = false
				break
			}
		}
		if ok {
			return s
		}
	}
	return 1
}
