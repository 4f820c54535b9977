package alertstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The shipped files the stack runs, by their names in dashboards/.
const (
	RulesFile        = "rules.yml"
	AlertsFile       = "alerts.yml"
	FleetAlertsFile  = "fleet_alerts.yml"
	FederateFile     = "federate.yml"
	AlertmanagerFile = "alertmanager.yml"
)

// AlertFiles are the shipped alerting rule files: the per-node alerts,
// right on any Prometheus that scrapes the node, and the fleet's, which
// must see every node of a file system.
func AlertFiles() []string { return []string{AlertsFile, FleetAlertsFile} }

// ShippedRuleFiles are every shipped rule file, as one Prometheus for the
// whole fleet loads them.
func ShippedRuleFiles() []string { return append([]string{RulesFile}, AlertFiles()...) }

// ModuleRoot is the top of the repository: the first directory at or
// above the working directory (a test's package directory) that holds
// go.mod. The stack finds the shipped files and the daemon's source from
// it, so that a test of any package can run it.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod at or above %s", dir)
		}
	}
}

// Shipped is the path of a shipped file of dashboards/, by name.
func Shipped(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(ModuleRoot(t), "dashboards", name)
}

// BuildExporter builds plateau_exporter from the repository's source into
// dir and returns its path.
func BuildExporter(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "plateau_exporter")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/plateau_exporter")
	cmd.Dir = ModuleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building plateau_exporter: %v\n%s", err, out)
	}
	return bin
}
