package plateau

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// pyyamlBaselines writes, with PyYAML's safe_dump, a baselines file whose
// measured_at values are every kind of time Python has: an aware datetime
// in UTC (PyYAML writes "2026-12-01 08:52:31+00:00"), one with microseconds
// in another zone, a naive one (no zone: UTC, as YAML says) and a date.
// testdata/baselines_pyyaml.yml is its output from PyYAML 6.0.
const pyyamlBaselines = `
import datetime, sys, yaml
utc = datetime.timezone.utc
doc = {"targets": {"scratch": {
    "seq": {"kind": "sequential", "params": "sequential workers=1 file_size=256MiB block_size=8MiB",
            "direct": True, "engine": "sync", "host": "node001",
            "measured_at": datetime.datetime(2026, 12, 1, 8, 52, 31, tzinfo=utc),
            "method": "characterize --runs 5",
            "ops": {"write": {"bytes_per_second": 1.2e9, "spread": 0.03, "runs": 5},
                    "read": {"bytes_per_second": 2100000000.0, "spread": 0.02, "runs": 5}}},
    "md": {"kind": "metadata", "measured_at": datetime.datetime(2026, 12, 1, 9, 0, 0, 250000, tzinfo=datetime.timezone(datetime.timedelta(hours=-5))),
           "ops": {"create": {"operations_per_second": 50000}, "remove": {"operations_per_second": 41000.5}}},
    "rand": {"kind": "random", "measured_at": datetime.datetime(2026, 12, 1, 10, 15, 0),
             "ops": {"read": {"operations_per_second": 12000}}},
    "shared": {"kind": "shared_file", "measured_at": datetime.date(2026, 11, 30),
               "ops": {"write": {"bytes_per_second": 3e9}}},
}}}
sys.stdout.write(yaml.safe_dump(doc, default_flow_style=False))
`

// pyyamlWant is what the file above holds, as ParseBaselines must read it.
var pyyamlWant = map[BaselineKey]struct {
	value float64
	at    time.Time
}{
	{"scratch", "seq", "write"}:    {1.2e9, time.Date(2026, 12, 1, 8, 52, 31, 0, time.UTC)},
	{"scratch", "seq", "read"}:     {2.1e9, time.Date(2026, 12, 1, 8, 52, 31, 0, time.UTC)},
	{"scratch", "md", "create"}:    {5e4, time.Date(2026, 12, 1, 14, 0, 0, 250000000, time.UTC)},
	{"scratch", "md", "remove"}:    {41000.5, time.Date(2026, 12, 1, 14, 0, 0, 250000000, time.UTC)},
	{"scratch", "rand", "read"}:    {12000, time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)},
	{"scratch", "shared", "write"}: {3e9, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
}

func checkPyYAMLBaselines(t *testing.T, b *Baselines) {
	t.Helper()
	if len(b.Entries) != len(pyyamlWant) {
		t.Errorf("%d entries, want %d", len(b.Entries), len(pyyamlWant))
	}
	for k, w := range pyyamlWant {
		e := b.Entries[k]
		if e == nil {
			t.Errorf("%v missing", k)
			continue
		}
		if e.Value != w.value || !e.MeasuredAt.Equal(w.at) {
			t.Errorf("%v: value %g measured_at %v, want %g at %v", k, e.Value, e.MeasuredAt, w.value, w.at)
		}
	}
	if s := b.Entries[BaselineKey{"scratch", "seq", "write"}]; s != nil && (s.Direct != "true" || s.Runs != 5 || s.Method != "characterize --runs 5") {
		t.Errorf("seq write: %+v", s)
	}
}

// A file PyYAML wrote (and committed) parses whatever this machine has.
func TestBaselinesWrittenByPyYAMLParse(t *testing.T) {
	b, err := LoadBaselines(filepath.Join("testdata", "baselines_pyyaml.yml"))
	if err != nil {
		t.Fatal(err)
	}
	checkPyYAMLBaselines(t, b)
}

// requirePyYAML finds python3 with the yaml module (Debian python3-yaml).
// `go test` must pass with Go alone, so a missing one skips, loudly; in
// CI, which installs it (.ci/packages.txt), it fails.
func requirePyYAML(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(py, "-c", "import yaml").Run()
	}
	if err == nil {
		return py
	}
	probetest.MissingTool(t, fmt.Sprintf("python3 with PyYAML is not available (%v): install the Debian package python3-yaml; "+
		"the baselines file is NOT tested against a real YAML tool in this run", err))
	return ""
}

// The round trip through a real YAML tool: what PyYAML writes now parses
// to the same values and times, and what Marshal writes PyYAML reads back
// as the same values and times (measured_at to the second, as Marshal
// writes it).
func TestBaselinesRoundTripThroughPyYAML(t *testing.T) {
	py := requirePyYAML(t)
	out, err := exec.Command(py, "-c", pyyamlBaselines).Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	b, err := ParseBaselines(out, "pyyaml.yml")
	if err != nil {
		t.Fatalf("what PyYAML wrote does not parse: %v\n%s", err, out)
	}
	checkPyYAMLBaselines(t, b)

	// Back: PyYAML loads Marshal's output; the script prints each op's
	// value and measured_at as Unix seconds.
	const load = `
import calendar, datetime, json, sys, yaml
doc = yaml.safe_load(sys.stdin)
out = {}
for target, probes in doc["targets"].items():
    for name, p in probes.items():
        at = p["measured_at"]
        if not isinstance(at, datetime.datetime):
            raise SystemExit("measured_at of %s/%s is a %s, not a timestamp" % (target, name, type(at).__name__))
        if at.tzinfo is None:
            at = at.replace(tzinfo=datetime.timezone.utc)
        for op, v in p["ops"].items():
            unit = "bytes_per_second" if "bytes_per_second" in v else "operations_per_second"
            out["%s/%s/%s" % (target, name, op)] = [v[unit], at.timestamp()]
json.dump(out, sys.stdout)
`
	cmd := exec.Command(py, "-c", load)
	cmd.Stdin = bytes.NewReader(b.Marshal())
	cmd.Stderr = os.Stderr
	back, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyYAML cannot load what Marshal wrote: %v\n%s", err, b.Marshal())
	}
	var got map[string][2]float64
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatalf("%v: %s", err, back)
	}
	if len(got) != len(pyyamlWant) {
		t.Errorf("PyYAML read %d ops back, want %d: %s", len(got), len(pyyamlWant), back)
	}
	for k, w := range pyyamlWant {
		g, ok := got[k.Target+"/"+k.Probe+"/"+k.Op]
		if !ok || math.Abs(g[0]-w.value) > 1e-6*w.value || g[1] != float64(w.at.Unix()) {
			t.Errorf("%v: PyYAML read %v, want %g at %d\n%s", k, g, w.value, w.at.Unix(), b.Marshal())
		}
	}
}
