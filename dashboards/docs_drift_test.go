package dashboards

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// userDocGlobs are the user documentation outside this directory that
// quotes metric names: the README, the configuration reference, the guides
// under docs/ and the benchmark and bench-cluster reports. The README's
// long chapters moved into these files; they keep the names they quote
// true to what the daemon exports, as RUNBOOK.md is kept. CHANGELOG.md is
// not among them: history names metrics that a later change renamed.
var userDocGlobs = []string{
	"../README.md",
	"../CONFIGURATION.md",
	"../docs/*.md",
	"../bench/README.md",
	"../bench/cluster/*.md",
	"../packaging/README.md",
}

// notInExpositions are names in the user documentation that no golden or
// fixture exposition holds, each with where its truth is kept instead.
var notInExpositions = map[string]struct{ why, file, declares string }{
	// A GPFS fileset name in the placement policy that pins a directory
	// to a pool, not a metric.
	"plateau_pool1": {"a fileset name", "", ""},
	// Exported only while the SMART helper runs (a daemon started as root
	// with CAP_SYS_ADMIN to hand over), which no fixture test sets up.
	"plateau_nvme_smart_helper_up": {"the SMART helper's gauge", "../collector/nvme.go", `name("smart_helper_up")`},
}

// userDocs returns the user documentation files that exist, sorted. The
// README and the configuration reference must exist.
func userDocs(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, g := range userDocGlobs {
		paths, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, paths...)
	}
	sort.Strings(files)
	for _, must := range []string{"../README.md", "../CONFIGURATION.md"} {
		found := false
		for _, f := range files {
			found = found || f == must
		}
		if !found {
			t.Errorf("%s is missing", must)
		}
	}
	return files
}

// TestDocsNameExportedMetrics extends TestProseNamesExportedMetrics to
// every user document: a metric or recorded series quoted in the README,
// CONFIGURATION.md, docs/, bench/README.md or the bench cluster's report
// must be one the daemon exports or rules.yml (or a site's rule file of the
// shipped examples) records.
func TestDocsNameExportedMetrics(t *testing.T) {
	exported, _ := exportedMetrics(t)
	recorded := recordedNames(t)
	for _, f := range userDocs(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, tok := range metricTokenRE.FindAllString(line, -1) {
				switch {
				case tok == "plateau_exporter", tok == "plateau_backtest":
					// The programs' names.
				case strings.Contains(tok, ":"):
					if !recorded[tok] {
						t.Errorf("%s:%d: mentions %s, which %s does not record", f, i+1, tok, rulesFile)
					}
				case strings.HasSuffix(tok, "_"):
					// A family by its prefix (plateau_probe_change_*).
					if !hasPrefix(exported, tok) {
						t.Errorf("%s:%d: mentions %s*, and plateau_exporter exports no metric of that prefix", f, i+1, tok)
					}
				case notInExpositions[tok].why != "":
					if n := notInExpositions[tok]; n.file != "" {
						src, err := os.ReadFile(n.file)
						if err != nil || !strings.Contains(string(src), n.declares) {
							t.Errorf("%s:%d: mentions %s (%s), which %s no longer declares (%v)", f, i+1, tok, n.why, n.file, err)
						}
					}
				case exported[tok] == nil:
					t.Errorf("%s:%d: mentions %s, which plateau_exporter does not export", f, i+1, tok)
				}
			}
		}
	}
}

func hasPrefix(e exposition, prefix string) bool {
	for name := range e {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}
