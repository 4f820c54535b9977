package engine

import (
	"fmt"
	"testing"
)

// The metadata probe's names are as long as mdtest's for the same task and
// file (mdtest -F -u -L -z 1 -b 1 -I files: file.mdtest.<task>.<files+j>),
// so its directories take the same blocks; they are unique and among the
// names the safety rules let the probe delete.
func TestMetadataNamesAreMdtestLong(t *testing.T) {
	for _, c := range []struct{ worker, files int }{{0, 4096}, {0, 1}, {7, 100}, {12, 1000}, {255, 99}, {3, 1 << 20}} {
		names := metadataNames(c.worker, c.files)
		if len(names) != c.files {
			t.Fatalf("%+v: %d names", c, len(names))
		}
		seen := map[string]bool{}
		for j, n := range names {
			mdtest := fmt.Sprintf("file.mdtest.%d.%d", c.worker, c.files+j)
			if len(n) != len(mdtest) || !generatedName.MatchString(n) || seen[n] {
				t.Fatalf("%+v: name %d is %q (%d bytes); want a unique generated name of %d bytes, as long as mdtest's %q",
					c, j, n, len(n), len(mdtest), mdtest)
			}
			seen[n] = true
		}
	}
	if got := metadataNames(0, 4096)[17]; got != "f00000000000000017" {
		t.Errorf("worker 0, file 17 of 4096: %q", got)
	}
}
