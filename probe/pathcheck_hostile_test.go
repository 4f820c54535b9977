package probe

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Eight targets on one hung mount: a check (a reload) gives up after one
// deadline, not eight, and names every target; two targets on one path
// are both reported, not each other's "earlier check".
func TestPathCheckerHungTargetsOneDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	pc := &PathChecker{stat: func(string) (os.FileInfo, error) { <-release; return nil, os.ErrNotExist }}
	cfg := &Config{Source: "cfg.yml"}
	for i := 0; i < 8; i++ {
		cfg.Targets = append(cfg.Targets, &Target{Name: fmt.Sprint(i), Path: fmt.Sprintf("/hung/t%d", i%7), Line: 3 + i})
	}
	const deadline = 300 * time.Millisecond
	start := time.Now()
	err := pc.Check(cfg, deadline)
	took := time.Since(start)
	if took >= 4*deadline {
		t.Errorf("check of 8 hung targets took %s with a %s deadline", took, deadline)
	}
	for i := 0; i < 8; i++ {
		if !strings.Contains(fmt.Sprint(err), fmt.Sprintf("targets[%d].path: stat /hung/t%d did not answer", i, i%7)) {
			t.Errorf("target %d not reported hung: %v", i, err)
		}
	}
}

// Many distinct targets whose checks end at once: the checks write their
// results while the loop that starts them is still going. That loop read
// the same map, and the runtime ends a program that reads a map while
// another goroutine writes it ("concurrent map read and map write"): a
// reload of a config with many targets could kill the daemon.
func TestPathCheckerManyTargetsAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := &Config{Source: "cfg.yml"}
	for i := 0; i < 400; i++ {
		cfg.Targets = append(cfg.Targets, &Target{Name: fmt.Sprint(i), Path: fmt.Sprintf("%s/t%d", dir, i%300), Line: 3 + i})
	}
	// Checks that end at once, as on a file system that answers in
	// microseconds; every one of them fails (no such directory), so each
	// writes an error.
	pc := &PathChecker{stat: func(string) (os.FileInfo, error) { return nil, os.ErrNotExist }}
	for round := 0; round < 20; round++ {
		err := pc.Check(cfg, time.Second)
		if n := strings.Count(fmt.Sprint(err), ".path: "); n != len(cfg.Targets) {
			t.Fatalf("round %d: %d targets reported, want all %d", round, n, len(cfg.Targets))
		}
	}
}
