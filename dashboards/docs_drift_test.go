package dashboards

import (
	"os"
	"path/filepath"
	"regexp"
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
	"plateau_nvme_smart_helper_up": {"the SMART helper's gauge", "../collector/nvme.go", `desc("smart_helper_up",`},
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

// pendingDocs are guides the README's map links to that other work writes;
// until they exist a link to one is not an error, and once they exist
// their links and anchors are checked like every other.
var pendingDocs = map[string]bool{
	"../docs/security.md":        true,
	"../docs/lustre-versions.md": true,
	"../docs/gpfs-iohist.md":     true,
}

// markdownLinkRE finds inline links: [text](target).
var markdownLinkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings (lower case, punctuation but '-' and '_' dropped, spaces turned
// into hyphens), leaving out lines inside fenced code blocks.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-")] = true
	}
	return out
}

// TestDocsLinksResolve follows every relative link of the user documentation
// and the runbook: the README's chapters moved into other files, and a link
// to a file that moved, or to a heading that changed its words, fails here
// instead of on a reader.
func TestDocsLinksResolve(t *testing.T) {
	files := append(userDocs(t), runbookFile, "../CHANGELOG.md")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range markdownLinkRE.FindAllStringSubmatch(line, -1) {
				link := m[1]
				if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(link, "#")
				target := f
				if path != "" {
					target = filepath.Join(filepath.Dir(f), path)
				}
				if _, err := os.Stat(target); err != nil {
					if !pendingDocs[filepath.ToSlash(target)] {
						t.Errorf("%s:%d: link %s: %v", f, i+1, link, err)
					}
					continue
				}
				if anchor != "" && strings.HasSuffix(target, ".md") && !headingAnchors(t, target)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", f, i+1, link, target, anchor)
				}
			}
		}
	}
}
