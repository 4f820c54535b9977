package engine

import (
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// What the integration tests, which run the engine through a real worker
// process from package engine_test, need of this package's own tests.

// KeptRandomFile is the path of a random probe's kept file.
func KeptRandomFile(target, probeName string) string { return keptRandomFile(target, probeName) }

// KeptState identifies a kept file: inode, size and mode.
type KeptState = keptState

// StatKept is the state of the kept file at path.
func StatKept(t *testing.T, path string) KeptState { return statKept(t, path) }

// CheckRandomPhases checks a random run's phases against its config.
func CheckRandomPhases(t *testing.T, res *probe.Result, p probe.ProbeConfig) {
	checkRandomPhases(t, res, p)
}

// CompleteOf reports whether the kept file is whole: size bytes and marked
// finished.
func (k keptState) CompleteOf(size int64) bool { return k.size == size && k.perm == randomFileComplete }

// KeepDirName is the name of a probe's keep directory.
func KeepDirName(probeName string) string { return keepDirPrefix + probeName }
