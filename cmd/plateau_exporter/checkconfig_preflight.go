package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/engine"
)

// preflightTargets runs, for every probe of every target, the checks a
// probe run makes before its I/O (engine.Preflight: the same function
// Execute calls, so the same words), and prints what the probes would
// refuse or skip. A refusal is an error naming the target's file and line;
// a min_free_ratio skip is a warning, as the daemon skips and goes on.
// Each call is bounded by probe.PathCheckDeadline: a hung mount is
// reported, not waited for.
func preflightTargets(w io.Writer, cfg *probe.Config, hostname string) error {
	var errs []error
	for i, t := range cfg.Targets {
		refused := false
		for _, p := range t.Probes {
			skip, err := preflightWithin(probe.NewRequest(t, p, hostname), probe.PathCheckDeadline)
			if err != nil {
				errs = append(errs, &probe.ConfigError{File: cfg.Source, Line: t.Line, Field: fmt.Sprintf("targets[%d].path", i),
					Msg: fmt.Sprintf("every probe of target %s would be refused: %v", t.Name, err)})
				refused = true
				break
			}
			if skip != "" {
				fmt.Fprintf(w, "warning: target %s probe %s would be skipped (reason=min_free): %s\n", t.Name, p.Name, skip)
			}
		}
		if !refused {
			fmt.Fprintf(w, "target %s: %s/%s passes the probes' own checks\n", t.Name, t.Path, hostname)
		}
	}
	for _, e := range errs {
		fmt.Fprintln(w, e)
	}
	return errors.Join(errs...)
}

func preflightWithin(req probe.Request, deadline time.Duration) (string, error) {
	type answer struct {
		skip string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		skip, err := engine.Preflight(req)
		done <- answer{skip, err}
	}()
	select {
	case a := <-done:
		return a.skip, a.err
	case <-time.After(deadline):
		return "", fmt.Errorf("the checks of %s did not return in %s (hung mount?)", req.Path, deadline)
	}
}
