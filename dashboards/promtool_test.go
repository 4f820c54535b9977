package dashboards

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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
func TestPromtoolTestRules(t *testing.T) {
	promtool := requireTool(t, "promtool", "prometheus")
	files, err := filepath.Glob(promtoolTestGlob)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no promtool test files match %s", promtoolTestGlob)
	}
	runTool(t, promtool, append([]string{"test", "rules"}, files...)...)
}

func TestAmtoolCheckConfig(t *testing.T) {
	amtool := requireTool(t, "amtool", "prometheus-alertmanager")
	runTool(t, amtool, "check-config", alertmanagerFile)
}
