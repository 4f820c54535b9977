package probetest

import (
	"os"
	"path/filepath"
	"testing"
)

// ProbeDirEntries lists what runs left in target's probe directory for
// host node1, leaving out the lock file every run creates.
func ProbeDirEntries(t *testing.T, target string) []string {
	t.Helper()
	return HostProbeDirEntries(t, target, "node1")
}

// HostProbeDirEntries lists what runs left in target's probe directory
// for host, leaving out the lock file every run creates.
func HostProbeDirEntries(t *testing.T, target, host string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(target, host))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != ".lock" {
			names = append(names, e.Name())
		}
	}
	return names
}
