package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// lintAccepted are the problems `promtool check metrics` reports on the
// golden /metrics that are kept on purpose, each with why. Renaming a
// series breaks the dashboards and rules sites built on it, so a name
// stays when the lint's reason does not apply to it.
var lintAccepted = map[string]string{
	// The lint guards against names that restate the series' Prometheus
	// type. Here "counter" names the hardware's port counters (the
	// performance-management counters of the InfiniBand spec, one per
	// label counter=, which stop at their maximum instead of wrapping);
	// the series is a 0/1 gauge, and the dashboards and RUNBOOK use it.
	"plateau_infiniband_port_counter_saturated metric name should not include type 'counter'": "the hardware's port counters, not the series' type",
}

// volatileValue is the mask normalize puts in place of a value that
// changes from run to run; promtool needs a number there.
var volatileValue = regexp.MustCompile(`(?m) <volatile>$`)

// requirePromtool finds promtool of the Debian package prometheus.
func requirePromtool(t *testing.T) string {
	t.Helper()
	return probetest.RequireTool(t, "promtool", "prometheus", "the golden /metrics' lint")
}

// TestGoldenMetricsLint runs `promtool check metrics` on the golden
// /metrics, as node_exporter's checkmetrics.sh does on its end-to-end
// output (which also leaves out the names it keeps knowingly), and fails
// on every problem it reports that lintAccepted does not name, and on an
// accepted one it no longer reports (the exception would outlive its
// reason).
func TestGoldenMetricsLint(t *testing.T) {
	promtool := requirePromtool(t)
	golden, err := os.ReadFile(filepath.Join("testdata", "metrics.golden"))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promtoolCheckMetrics(promtool, volatileValue.ReplaceAll(golden, []byte(" 0")))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range problems {
		if _, ok := lintAccepted[p]; ok {
			seen[p] = true
			continue
		}
		t.Errorf("promtool check metrics on testdata/metrics.golden: %s", p)
	}
	for p, why := range lintAccepted {
		if !seen[p] {
			t.Errorf("promtool no longer reports %q (accepted because %s): remove it from lintAccepted", p, why)
		}
	}
}

// promtoolCheckMetrics returns the problems promtool reports on an
// exposition, one line each. promtool exits 0 when it finds none, 3 when
// it lists some (on stderr), and 1 when it cannot read the text, which is
// an error here.
func promtoolCheckMetrics(promtool string, exposition []byte) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &exit) && exit.ExitCode() == 3:
	default:
		return nil, fmt.Errorf("%s: %w\n%s%s", cmd, err, stdout.Bytes(), stderr.Bytes())
	}
	var problems []string
	for _, line := range strings.Split(stdout.String()+stderr.String(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			problems = append(problems, line)
		}
	}
	if len(problems) == 0 {
		return nil, fmt.Errorf("%s exited 3 but listed no problem", cmd)
	}
	return problems, nil
}
