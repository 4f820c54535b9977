package probe

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// PathCheckDeadline bounds the check of each target path.
const PathCheckDeadline = 5 * time.Second

// CheckPaths verifies that every target path is an existing directory. A
// stat on a hung mount can block forever, so each runs with a deadline; a
// path that does not answer in time is reported as an error too, because a
// daemon started on a hung mount would only ever time out.
func (c *Config) CheckPaths(deadline time.Duration) error {
	return new(PathChecker).Check(c, deadline)
}

// PathChecker checks target paths and remembers the checks that never
// returned. A stat on a hung mount holds a thread in the kernel until the
// mount recovers; the daemon checks its paths again on every reload, and
// without this each SIGHUP during an outage would block one more thread.
// A path whose earlier check is still blocked is reported hung at once.
// The collector's stuckCalls guards its commands and SMART reads the same
// way; it is not shared because no package may serve both: collector never
// imports probe, and probe no internal/ package (TestImportDirections).
type PathChecker struct {
	mu      sync.Mutex
	blocked map[string]bool
	// stat is os.Stat; tests replace it to block.
	stat func(string) (os.FileInfo, error)
}

// Check is CheckPaths with the checker's memory of blocked paths.
//
// The targets are checked at once, so that a check (a reload) takes one
// deadline at most however many targets share a hung mount, not one per
// target: eight made a reload wait 40 s.
func (pc *PathChecker) Check(c *Config, deadline time.Duration) error {
	// One check per distinct path: two checks of one path at once would
	// see each other as blocked.
	// The distinct paths are listed before any check starts: the checks
	// write their results into the map as they end, so nothing else may
	// touch it meanwhile (a lookup in the loop that started them was a
	// concurrent map read and write, which the runtime kills the daemon for).
	var paths []string
	results := map[string]error{}
	for _, t := range c.Targets {
		if _, seen := results[t.Path]; seen || t.CreatePath {
			continue
		}
		results[t.Path] = nil
		paths = append(paths, t.Path)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, path := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pc.statDir(path, deadline)
			mu.Lock()
			results[path] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	var errs []error
	for i, t := range c.Targets {
		if t.CreatePath || results[t.Path] == nil {
			continue
		}
		field := fmt.Sprintf("targets[%d].path", i)
		errs = append(errs, &ConfigError{File: c.Source, Line: t.Line, Field: field, Msg: results[t.Path].Error()})
	}
	return errors.Join(errs...)
}

func (pc *PathChecker) statDir(path string, deadline time.Duration) error {
	pc.mu.Lock()
	if pc.blocked[path] {
		pc.mu.Unlock()
		return fmt.Errorf("stat %s has not answered since an earlier check (hung mount?)", path)
	}
	if pc.blocked == nil {
		pc.blocked = map[string]bool{}
	}
	pc.blocked[path] = true
	stat := pc.stat
	pc.mu.Unlock()
	if stat == nil {
		stat = os.Stat
	}

	done := make(chan error, 1)
	go func() {
		fi, err := stat(path)
		pc.mu.Lock()
		delete(pc.blocked, path)
		pc.mu.Unlock()
		switch {
		case err != nil:
			done <- err
		case !fi.IsDir():
			done <- fmt.Errorf("%s is not a directory", path)
		default:
			done <- nil
		}
	}()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("stat %s did not answer within %s (hung mount?)", path, deadline)
	}
}
