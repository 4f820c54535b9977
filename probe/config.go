// Package probe holds what crosses plateau_exporter's package and process
// boundaries: the configuration and its parser, the schema of each probe
// kind (its keys, ops, defaults, validation, bytes per run and limits), the
// Request the daemon sends a probe-worker and the Result it gets back, and
// the names of kinds, engines, units, skip and error reasons. It runs
// nothing. The probes run in probe/engine, inside the child process that
// probe/worker starts; probe/schedule decides when, probe/plateau what a
// result is worth, and probe/store what /metrics shows of it.
package probe

import (
	"sort"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe/internal/yamlfield"
)

// Defaults of the design's config contract.
const (
	DefaultInterval      = 15 * time.Minute
	DefaultTimeout       = 2 * time.Minute
	DefaultWarningRatio  = 0.8
	DefaultCriticalRatio = 0.5
	minInterval          = time.Second
	// EmbeddedSource names the built-in config in messages and metrics.
	EmbeddedSource = "embedded default"
)

// Values of a target's when_job_running: what a Slurm job holding the node
// means for the target's probes at their slots. Skip is the default: a
// probe beside a job both slows the job and measures it, not the storage.
const (
	WhenJobSkip = "skip"
	WhenJobRun  = "run"
)

// Config is the parsed, validated configuration.
type Config struct {
	Defaults      Defaults
	Targets       []*Target
	BaselinesFile string
	// Source is the file the config came from, or EmbeddedSource.
	Source string
}

// Defaults apply to every probe that does not set its own value.
type Defaults struct {
	Interval time.Duration
	Timeout  time.Duration
	Splay    bool
}

// Target is one directory on a file system under test.
type Target struct {
	Name            string
	Path            string
	MinFreeRatio    float64
	MaxBytesPerHour int64
	WarningRatio    float64
	CriticalRatio   float64
	// WhenJobRunning is WhenJobSkip or WhenJobRun.
	WhenJobRunning string
	Probes         []*ProbeConfig
	// Fleet is the target's fleet block, nil without one. Stretch is how
	// the node's share of its budget stretched the probes' intervals
	// (Factor 1: not at all); see ApplyFleet.
	Fleet   *Fleet
	Stretch Stretch
	Line    int
	// CreatePath lets the embedded default create its temp directory; a
	// configured path must already exist, because creating it could put the
	// probe on the wrong file system when a mount is missing.
	CreatePath bool
	// Server is the data server (OST, NSD server, chunkserver, storage
	// target) this target's directory is pinned to, and ServerGroup the
	// name of the configured target whose `servers` list made it (see
	// ServerPlaceholder); both "" for an ordinary target.
	Server      string
	ServerGroup string
	// Serves is, on a storage server's own daemon, the name of the
	// clients' target of the file system this target's device serves
	// (plateau_target_serves_info): the file-system page names the
	// servers whose own probes fell with it. "" for other targets.
	Serves string
}

// ServerPlaceholder is what a target with `servers` has in its path: each
// server's target replaces it with the server's name.
const ServerPlaceholder = "{server}"

// ProbeConfig is one probe of a target. It travels to the worker process as
// JSON, so every field the probe needs is exported.
type ProbeConfig struct {
	Name        string        `json:"name"`
	Kind        string        `json:"kind"`
	Workers     int           `json:"workers,omitempty"`
	FileSize    int64         `json:"file_size,omitempty"`
	BlockSize   int64         `json:"block_size,omitempty"`
	SegmentSize int64         `json:"segment_size,omitempty"`
	QueueDepth  int           `json:"queue_depth,omitempty"`
	Duration    time.Duration `json:"duration,omitempty"`
	Files       int           `json:"files,omitempty"`
	ReadAfter   time.Duration `json:"read_after,omitempty"`
	// Interval is what the probe runs at: the configured interval, or
	// that stretched by the target's fleet budget (ConfiguredInterval is
	// then the one the config set; 0 when nothing derived it).
	Interval           time.Duration `json:"interval"`
	ConfiguredInterval time.Duration `json:"-"`
	Timeout            time.Duration `json:"timeout"`
	Splay              bool          `json:"splay"`
	Line               int           `json:"-"`
}

// ConfigError is one problem in a config file, located by line and field.

// ConfigError is one problem in a config or baselines file, located by
// line and field.
type ConfigError = yamlfield.Error

// Target returns the target with the given name, or nil.
func (c *Config) Target(name string) *Target {
	for _, t := range c.Targets {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// TargetNames lists the configured targets, sorted.
func (c *Config) TargetNames() []string {
	names := make([]string, 0, len(c.Targets))
	for _, t := range c.Targets {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}
