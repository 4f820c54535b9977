package probe

import "time"

// A fleet characterization (characterize --slurm) runs the probes' I/O as
// Slurm tasks: one srun per phase of a sweep step, one task per worker, each
// running the hidden `plateau_exporter slurm-task` command. The coordinator
// hands every task of a step the same SlurmTaskRequest in the environment
// variable SlurmTaskEnv; each task finds its own index in SLURM_PROCID and
// prints one SlurmTaskResult as a line "SlurmTaskLinePrefix {json}" on its
// stdout, which srun gathers for the coordinator.

// SlurmTaskEnv is the environment variable holding a step's request (JSON).
const SlurmTaskEnv = "PLATEAU_SLURM_TASK"

// SlurmTaskLinePrefix starts every result line a task prints; lines
// without it (a site's shell profile, srun's own messages) are not results.
const SlurmTaskLinePrefix = "plateau-task: "

// Phases of a Slurm task. A sequential or shared_file step is a write
// phase then, in a separate srun as IOR runs -w then -r, a read phase; a
// metadata step is one phase per op (create, stat, read, remove, each its
// own srun), as mdtest separates them with barriers; SlurmPhaseProbe runs
// the configured probe once, as the daemon would, on the task's node (the
// node-class sample).
const (
	SlurmPhaseWrite    = "write"
	SlurmPhaseRead     = "read"
	SlurmPhaseMetadata = "metadata"
	SlurmPhaseProbe    = "probe"
)

// SlurmTaskRequest is what every task of one srun is asked to do.
type SlurmTaskRequest struct {
	Target string `json:"target"`
	// Path is the target path, Host the coordinator's probe directory in
	// it (<path>/<host>/) and Run the step's run directory in that, which
	// the coordinator created and removes: every task of the step works in
	// the same directory of the shared file system.
	Path  string `json:"path"`
	Host  string `json:"host"`
	Run   string `json:"run,omitempty"`
	Phase string `json:"phase"`
	// Op is the metadata op of a SlurmPhaseMetadata phase: create, stat,
	// read or remove, one srun each, in that order.
	Op string `json:"op,omitempty"`
	// Probe is the probe whose I/O each task does as one worker: its
	// file_size (sequential), segment_size (shared_file) or files
	// (metadata) is one task's share; its workers are not used.
	Probe ProbeConfig `json:"probe"`
	// Tasks is the step's number of tasks; on a read, task i reads what
	// task (i + Shift) mod Tasks wrote.
	Tasks int `json:"tasks"`
	Shift int `json:"shift,omitempty"`
	// StartAt is the step's start barrier: every task prepares its files,
	// then sleeps until StartAt and starts its timed I/O then. Clocks of
	// the nodes are taken to agree (NTP) to well under the lead time.
	StartAt time.Time `json:"start_at"`
	// Nonce makes this step's data differ from every other's.
	Nonce uint64 `json:"nonce"`
	// Request is the probe run of SlurmPhaseProbe; its hostname is filled
	// in by the task, from the node it runs on.
	Request *Request `json:"request,omitempty"`
}

// SlurmTaskResult is what one task reports.
type SlurmTaskResult struct {
	Task  int    `json:"task"`
	Node  string `json:"node"`
	Phase string `json:"phase"`
	// Arrived is when the task was ready to start; after the request's
	// StartAt, it missed the barrier and started late.
	Arrived time.Time     `json:"arrived"`
	Ops     []SlurmTaskOp `json:"ops,omitempty"`
	Direct  bool          `json:"direct"`
	Engine  string        `json:"engine,omitempty"`
	Error   string        `json:"error,omitempty"`
	// Result is the probe run of SlurmPhaseProbe.
	Result *Result `json:"result,omitempty"`
}

// SlurmTaskOp is one timed op of a task: Done units (bytes for the data
// kinds, operations for metadata) from Start to End, open, fsync and close
// included.
type SlurmTaskOp struct {
	Op    string    `json:"op"`
	Done  int64     `json:"done"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Progress samples how much was done when, so that the coordinator can
	// take every task's amount at the moment the first task finished (the
	// stonewalled aggregate); empty means the op progressed evenly from
	// Start to End.
	Progress []SlurmProgress `json:"progress,omitempty"`
}

// SlurmProgress is one sample of an op's progress: Done units after S
// seconds from the op's Start.
type SlurmProgress struct {
	S    float64 `json:"s"`
	Done int64   `json:"done"`
}
