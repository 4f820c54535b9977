package probe

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/plateau-exporter/plateau_exporter"

// importRule forbids a package (and what it imports, transitively) to
// depend on the listed packages.
type importRule struct {
	pkg    string
	never  []string
	reason string
}

// importRules are the directions of the probe packages: cmd wires them;
// store -> plateau -> probe; schedule -> worker -> engine -> probe;
// nodejobs stands alone (cmd hands it to schedule as a JobWatcher);
// backtest -> characterize -> plateau. What the daemon runs at every probe
// (plateau, store, schedule) never reaches the characterization, the
// backtest or Prometheus's rule engine.
var importRules = []importRule{
	{"probe", []string{"probe/engine", "probe/worker", "probe/schedule", "probe/plateau", "probe/characterize", "probe/backtest", "probe/store", "collector"},
		"the root holds what crosses packages; it imports none of them"},
	{"collector", []string{"probe"}, "counters and probes are independent halves of the exporter"},
	{"probe/engine", []string{"probe/worker", "probe/schedule", "probe/plateau", "probe/store", "collector",
		"github.com/prometheus/client_golang/prometheus", "github.com/prometheus/exporter-toolkit/web", "net/http"},
		"the code that can hang in D state on a dead mount must not reach the scrape path"},
	{"probe/worker", []string{"probe/schedule", "probe/plateau", "probe/store", "collector"}, "the pipe knows only requests and results"},
	{"probe/schedule", []string{"probe/store", "probe/plateau", "collector"}, "the scheduler reports through its own interface and never reads exposition state"},
	{"probe/store", []string{"probe/schedule", "probe/worker", "probe/engine", "collector"}, "the store records what it is told; cmd wires it to the scheduler"},
	{"probe/iocount", []string{"probe", "probe/engine", "probe/worker", "probe/schedule", "probe/plateau", "probe/store", "collector", "internal/statuspage",
		"github.com/prometheus/client_golang/prometheus"},
		"the node's I/O counters are read from /proc and from a function cmd wires to the gpfs collector; they know nothing of probes or exposition"},
	{"probe/nodejobs", []string{"probe", "probe/engine", "probe/worker", "probe/schedule", "probe/plateau", "probe/store", "collector", "internal/statuspage",
		"github.com/prometheus/client_golang/prometheus", "net/http"},
		"job awareness reads slurmd's cgroup tree and spool and knows nothing of probes or exposition; schedule asks it through an interface of its own"},
	{"probe/plateau", []string{"probe/backtest", "probe/characterize", "probe/store", "probe/schedule", "probe/worker", "probe/engine", "collector"}, "the verdict depends on results, not on how they were obtained"},
	{"probe/plateau", []string{"github.com/prometheus/prometheus", "github.com/prometheus/client_golang/prometheus"},
		"what the daemon reads at every run is plain data: no rule engine, no exposition"},
	{"probe/characterize", []string{"probe/backtest", "probe/store", "probe/schedule", "probe/worker", "probe/engine", "collector", "github.com/prometheus/prometheus"},
		"characterize measures through the probe.Request runner cmd hands it and writes baselines; it never reaches the daemon's schedule or exposition, nor the rule engine"},
	{"probe/backtest", []string{"probe/store", "probe/schedule", "probe/worker", "probe/engine", "collector"},
		"the backtest replays recorded results through the verdict's own code and the rules, never the probing"},
	{"probe/schedule", []string{"probe/characterize", "probe/backtest", "github.com/prometheus/prometheus"}, "the daemon's schedule never links characterization or the rule engine"},
	{"probe/worker", []string{"probe/characterize", "probe/backtest", "github.com/prometheus/prometheus"}, "the probe worker never links characterization or the rule engine"},
	{"probe/store", []string{"probe/backtest", "probe/characterize", "github.com/prometheus/prometheus"},
		"the scrape path computes nothing with Prometheus's engine; the backtest is a command of its own"},
	{"cmd/plateau_exporter", []string{"internal/probefixture", "internal/faultfs", "internal/mfscluster", "internal/slurmtest", "internal/testkit"}, "test helpers never ship in the binary"},
	// Prometheus's rules package imports its notifier, and with it the
	// configuration and service discovery of every cloud (the TSDB, its
	// remote write): linked, they made the binary 39 MB instead of 28 and
	// the idle daemon's RSS 25 MiB instead of 15. The backtest evaluates
	// rules with the PromQL engine over a store of its own instead.
	{"cmd/plateau_exporter", []string{"github.com/prometheus/prometheus/rules", "github.com/prometheus/prometheus/notifier",
		"github.com/prometheus/prometheus/config", "github.com/prometheus/prometheus/discovery", "github.com/prometheus/prometheus/storage/remote",
		"github.com/aws/aws-sdk-go-v2", "github.com/Azure/azure-sdk-for-go", "google.golang.org/grpc"},
		"every node runs the binary: what only a backtest on a workstation needs must not be resident in each daemon"},
	// Even the PromQL engine alone, without them, made the idle daemon's
	// RSS 16.9 MiB where node_exporter's is 15.4 (bench/noise.sh): the
	// backtest is run by plateau_backtest, and the daemon's binary links
	// nothing of Prometheus's server (14.0 MiB).
	{"cmd/plateau_exporter", []string{"github.com/prometheus/prometheus", "probe/backtest"},
		"backtest runs in plateau_backtest, which plateau_exporter backtest hands its arguments to"},
	{"internal/backtestcli", []string{"probe", "probe/backtest", "github.com/prometheus/prometheus"},
		"the backtest's flags are declared in the daemon's binary too, which must not carry what runs the backtest"},
	{"internal/statuspage", []string{"collector", "probe/engine", "probe/worker", "probe/schedule", "probe/backtest", "probe/characterize", "internal/testkit", "internal/faultfs", "github.com/prometheus/prometheus"},
		"the page reads snapshots and draws them; it never reaches the code that runs probes and can hang on a dead mount"},
	// The status page sits above the store and the collectors, wired by
	// cmd: none of them may depend on it.
	{"probe", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"probe/engine", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"probe/worker", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"probe/schedule", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"probe/plateau", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"probe/characterize", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"probe/backtest", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"probe/backtest/ruleeval", []string{"probe"}, "the rule evaluator knows nothing of probes: the backtest writes their series into its store"},
	{"probe/backtest/groundtruth", []string{"probe/backtest/ruleeval", "github.com/prometheus/prometheus"}, "what really happened is read from the recorded series, never from the rules it judges"},
	{"probe/backtest", []string{"probe/backtest/promfetch"}, "the Prometheus reader hands the backtest its series, never the other way"},
	{"probe/store", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
	{"collector", []string{"internal/statuspage"}, "the status page reads the probes and counters, never the other way"},
}

// TestImportDirections holds the packages to the import rules, from what
// the go command itself resolves, so that a new import that runs the wrong
// way fails here rather than in review.
func TestImportDirections(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		deps[fields[0]] = fields[1:]
	}
	for _, r := range importRules {
		pkg := module + "/" + r.pkg
		ds, ok := deps[pkg]
		if !ok {
			t.Errorf("rule for %s: no such package", r.pkg)
		}
		for _, d := range ds {
			for _, never := range r.never {
				target := never
				if !strings.Contains(never, ".") {
					target = module + "/" + never
				}
				if d == target || strings.HasPrefix(d, target+"/") {
					t.Errorf("%s depends on %s: %s", r.pkg, d, r.reason)
				}
			}
		}
	}
}
