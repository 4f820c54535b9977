package probe

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"
)

// Result is what one probe run measured. A worker process prints it as JSON
// on stdout; the in-process path returns it directly.
type Result struct {
	Target string    `json:"target"`
	Probe  string    `json:"probe"`
	Kind   string    `json:"kind"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	// Direct is true when the data went through O_DIRECT.
	Direct bool `json:"direct"`
	// Engine names how the I/O was issued (sync, libaio, goroutines).
	Engine string     `json:"engine"`
	Ops    []OpResult `json:"ops,omitempty"`
	// Skipped is set, with a reason, when the probe decided not to run.
	Skipped string `json:"skipped,omitempty"`
	// Reason is the error class of a failed run (enospc, eio, ... timeout,
	// other); empty on success.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Swept counts leftovers of killed runs removed before this run.
	Swept int `json:"swept,omitempty"`
}

// Fail marks the run failed with err, classified by ReasonOf, and drops
// what it measured: a half-run's numbers describe nothing.
func (r *Result) Fail(err error) {
	r.Reason = ReasonOf(err)
	// Bounded here, where every failure passes: the text goes to the log,
	// the page and /status.json (a sweep's error naming 150,000 foreign
	// entries was 12 MB).
	r.Error = BoundText(err.Error(), MaxErrorText)
	r.Ops = nil
}

// OK reports whether the run completed and measured something.
func (r *Result) OK() bool { return r.Reason == "" && r.Skipped == "" }

// Op returns the result of one operation, or nil.
func (r *Result) Op(name string) *OpResult {
	for i := range r.Ops {
		if r.Ops[i].Op == name {
			return &r.Ops[i]
		}
	}
	return nil
}

// OpResult is one phase of a run (write, read, create, ...).
type OpResult struct {
	Op         string  `json:"op"`
	Bytes      int64   `json:"bytes"`
	Operations int64   `json:"operations"`
	Seconds    float64 `json:"seconds"`
	// Latency of each operation of the phase (one block, one syscall).
	Latency *LatencyHistogram `json:"latency,omitempty"`
}

// BytesPerSecond is the phase's throughput.
func (o *OpResult) BytesPerSecond() float64 {
	if o.Seconds <= 0 {
		return 0
	}
	return float64(o.Bytes) / o.Seconds
}

// OperationsPerSecond is the phase's operation rate.
func (o *OpResult) OperationsPerSecond() float64 {
	if o.Seconds <= 0 {
		return 0
	}
	return float64(o.Operations) / o.Seconds
}

// Value is the phase's result in unit (UnitBytesPerSecond or
// UnitOpsPerSecond).
func (o *OpResult) Value(unit string) float64 {
	if unit == UnitBytesPerSecond {
		return o.BytesPerSecond()
	}
	return o.OperationsPerSecond()
}

// Engines, the `engine` label of plateau_probe_info: sync for the probes
// that issue one request at a time, libaio or goroutines for the random
// probe's requests in flight.
const (
	EngineSync       = "sync"
	EngineLibaio     = "libaio"
	EngineGoroutines = "goroutines"
)

var engines = []string{EngineSync, EngineLibaio, EngineGoroutines}

// Engines lists every engine a result can name.
func Engines() []string { return slices.Clone(engines) }

// Error reasons of the metric contract, from errno.
const (
	ReasonENOSPC = "enospc"
	ReasonEIO    = "eio"
	ReasonEACCES = "eacces"
	ReasonEROFS  = "erofs"
	ReasonESTALE = "estale"
	ReasonEDQUOT = "edquot"
	// ReasonENOENT is mostly a target path that does not exist: its file
	// system is not mounted (yet).
	ReasonENOENT  = "enoent"
	ReasonTimeout = "timeout"
	ReasonOther   = "other"
	// ReasonUnsafe is a probe directory the safety rules refuse.
	ReasonUnsafe = "unsafe"
)

var errorReasons = []string{ReasonENOSPC, ReasonEIO, ReasonEACCES, ReasonEROFS, ReasonESTALE, ReasonEDQUOT, ReasonENOENT, ReasonTimeout, ReasonUnsafe, ReasonOther}

// ErrorReasons lists every error reason, so counters start at zero.
func ErrorReasons() []string { return slices.Clone(errorReasons) }

// ErrUnsafe marks a probe directory that breaks the safety rules; the
// engine wraps it, ReasonOf classifies it as ReasonUnsafe.
var ErrUnsafe = errors.New("unsafe probe directory")

// ReasonOf classifies an error by its errno.
func ReasonOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrUnsafe):
		return ReasonUnsafe
	case errors.Is(err, syscall.ENOSPC):
		return ReasonENOSPC
	case errors.Is(err, syscall.EDQUOT):
		return ReasonEDQUOT
	case errors.Is(err, syscall.EIO):
		return ReasonEIO
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return ReasonEACCES
	case errors.Is(err, syscall.EROFS):
		return ReasonEROFS
	case errors.Is(err, syscall.ESTALE):
		return ReasonESTALE
	case errors.Is(err, syscall.ENOENT):
		return ReasonENOENT
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return ReasonTimeout
	}
	return ReasonOther
}
