package dashboards

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// requireTool finds a command of the Debian packages prometheus and
// prometheus-alertmanager. `make test` must pass on a machine with Go
// alone, so a missing tool skips, loudly; in CI (.ci/run installs both
// packages) it fails, so the rules are never shipped unchecked.
func requireTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s is not on PATH (%v): install the Debian package %s (apt-get install %s); "+
		"the rules and Alertmanager configuration of dashboards/ are NOT checked by it in this run",
		name, err, debianPackage, debianPackage)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, "WARNING: "+msg)
	t.Skip(msg)
	return ""
}

func runTool(t *testing.T, path string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	t.Logf("%s:\n%s", cmd, out)
}

func TestPromtoolCheckRules(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	runTool(t, promtool, append([]string{"check", "rules"}, shippedRuleFiles()...)...)
}

// TestPromtoolCheckFederateConfig checks the global Prometheus's federation
// job as the configuration file it is merged into.
func TestPromtoolCheckFederateConfig(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	runTool(t, promtool, "check", "config", federateFile)
}

// TestPromtoolTestRules runs every promtool unit test file; each loads
// every shipped rule file itself (see TestPromtoolTestsLoadTheShippedRules).
// A file is one subtest and one promtool, run in parallel up to go test's
// -parallel (GOMAXPROCS): promtool evaluates on one core, so the files
// share the machine's cores instead of running one after the other, and a
// failure names its file. The files start heaviest first (evalSteps), so
// that the longest does not start last and run alone.
func TestPromtoolTestRules(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	suites := loadPromtoolTests(t)
	files := slices.Collect(maps.Keys(suites))
	steps := map[string]int{}
	for _, f := range files {
		steps[f] = evalSteps(t, f, suites[f])
	}
	slices.SortFunc(files, func(a, b string) int { return cmp.Or(steps[b]-steps[a], strings.Compare(a, b)) })
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			t.Logf("%d evaluation steps", steps[f])
			runTool(t, promtool, "test", "rules", f)
		})
	}
}

// evalSteps estimates what a promtool test file costs: promtool evaluates
// every rule of the file's rule files at each evaluation_interval of each
// test group, up to the group's last eval_time.
func evalSteps(t *testing.T, path string, f promtoolTests) int {
	t.Helper()
	parse := func(s, def string) time.Duration {
		if s == "" {
			s = def
		}
		d, err := model.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return time.Duration(d)
	}
	every := parse(f.EvaluationInterval, "1m")
	steps := 0
	for _, g := range f.Tests {
		var last time.Duration
		for _, a := range g.AlertRuleTest {
			last = max(last, parse(a.EvalTime, "0s"))
		}
		for _, e := range g.PromqlExprTest {
			last = max(last, parse(e.EvalTime, "0s"))
		}
		steps += int(last / every)
	}
	return steps
}

func TestAmtoolCheckConfig(t *testing.T) {
	amtool := requireTool(t, "amtool", "prometheus-alertmanager")
	runTool(t, amtool, "check-config", alertmanagerFile)
}
