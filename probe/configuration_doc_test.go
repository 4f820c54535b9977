package probe

import (
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// configurationDoc is the configuration reference, relative to this
// package's directory.
const configurationDoc = "../CONFIGURATION.md"

// A configLevel is one place in the config where keys are accepted: the
// top, defaults, a target, a target's fleet block, or a probe (whose keys
// also depend on its kind).
type configLevel struct {
	name string // as CONFIGURATION.md writes a key's path before the key
	// field is the parser's name for a key at this level in errors.
	field func(key string) string
	// set puts key: value at this level of a config that is valid
	// without it.
	set func(cfg map[string]any, key string, value any)
}

func probeOf(cfg map[string]any) map[string]any {
	return cfg["targets"].([]any)[0].(map[string]any)["probes"].([]any)[0].(map[string]any)
}

var configLevels = []configLevel{
	{"", func(k string) string { return k }, func(c map[string]any, k string, v any) { c[k] = v }},
	{"defaults.", func(k string) string { return "defaults." + k }, func(c map[string]any, k string, v any) {
		c["defaults"] = map[string]any{k: v}
	}},
	{"targets[].", func(k string) string { return "targets[0]." + k }, func(c map[string]any, k string, v any) {
		c["targets"].([]any)[0].(map[string]any)[k] = v
	}},
	{"targets[].fleet.", func(k string) string { return "targets[0].fleet." + k }, func(c map[string]any, k string, v any) {
		c["targets"].([]any)[0].(map[string]any)["fleet"].(map[string]any)[k] = v
	}},
	{"targets[].probes[].", func(k string) string { return "targets[0].probes[0]." + k }, func(c map[string]any, k string, v any) {
		if k != "kind" { // the kind under test stays
			probeOf(c)[k] = v
		}
	}},
}

// validConfig is a config the parser accepts, with a fleet block and one
// probe of kind.
func validConfig(kind string) map[string]any {
	return map[string]any{
		"targets": []any{map[string]any{
			"name":   "t",
			"path":   "/srv/t",
			"fleet":  map[string]any{"nodes": 1},
			"probes": []any{map[string]any{"name": "p", "kind": kind}},
		}},
	}
}

// accepted asks the parser whether it takes key at level in a probe of
// kind: whatever it says of the value, it must not call the key unknown or
// foreign to the kind.
func accepted(t *testing.T, lv configLevel, key, kind string) bool {
	t.Helper()
	cfg := validConfig(kind)
	lv.set(cfg, key, "1")
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(data, "test.yml")
	if err == nil {
		return true
	}
	f := lv.field(key)
	return !strings.Contains(err.Error(), f+": unknown key") && !strings.Contains(err.Error(), f+": does not apply to kind")
}

// parserKeys returns every key name the config parser's code names: the
// cases of its `switch key` statements in this package's files, the
// kind-specific keys it has decoders for, and every kind's keys. Which of
// them each level accepts is then asked of the parser itself.
func parserKeys(t *testing.T) []string {
	t.Helper()
	keys := map[string]bool{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			if id, ok := sw.Tag.(*ast.Ident); !ok || id.Name != "key" {
				return true
			}
			for _, st := range sw.Body.List {
				for _, e := range st.(*ast.CaseClause).List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						keys[s] = true
					}
				}
			}
			return true
		})
	}
	for k := range keyParsers {
		keys[k] = true
	}
	for _, spec := range kinds {
		for _, k := range spec.keys {
			keys[k] = true
		}
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// documentedKey is one row of CONFIGURATION.md's key tables.
type documentedKey struct {
	level, key string
	kinds      []string // for probe keys: the kinds it applies to
	line       int
}

// documentedKeys reads the key tables of CONFIGURATION.md: every table row
// whose first cell is a key's path in backquotes.
func documentedKeys(t *testing.T) map[string]documentedKey {
	t.Helper()
	data, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]documentedKey{}
	for i, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		path := strings.Trim(strings.TrimSpace(cells[1]), "`")
		d := documentedKey{line: i + 1}
		for _, lv := range configLevels {
			if rest, ok := strings.CutPrefix(path, lv.name); ok && !strings.Contains(rest, ".") && len(lv.name) >= len(d.level) {
				d.level, d.key = lv.name, rest
			}
		}
		if d.key == "" {
			t.Errorf("%s:%d: %q is no key path this test knows (top, defaults., targets[]., targets[].fleet., targets[].probes[].)", configurationDoc, i+1, path)
			continue
		}
		if d.level == "targets[].probes[]." {
			for _, k := range strings.Split(strings.TrimSpace(cells[2]), ",") {
				k = strings.TrimSpace(k)
				if k == "all" {
					d.kinds = KindNames()
					break
				}
				if _, ok := kinds[k]; !ok {
					t.Errorf("%s:%d: %s: unknown kind %q in the kinds column", configurationDoc, i+1, path, k)
				}
				d.kinds = append(d.kinds, k)
			}
		}
		if prev, dup := out[path]; dup {
			t.Errorf("%s:%d: %s documented twice (first at line %d)", configurationDoc, i+1, path, prev.line)
		}
		out[path] = d
	}
	return out
}

// TestConfigurationDocumentsEveryKey holds CONFIGURATION.md to the parser:
// every key the parser accepts, at every level and for every probe kind, is
// documented there at that level (and for that kind), and every documented
// key is accepted where the document says. The key names come from the
// parser's code, the verdict on each from the parser itself.
func TestConfigurationDocumentsEveryKey(t *testing.T) {
	docs := documentedKeys(t)
	candidates := map[string]bool{}
	for _, k := range parserKeys(t) {
		candidates[k] = true
	}
	for _, d := range docs {
		candidates[d.key] = true
	}
	if len(candidates) < 20 {
		t.Fatalf("found only %d key names in the parser's code: the scan no longer sees its switch statements", len(candidates))
	}
	names := make([]string, 0, len(candidates))
	for k := range candidates {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, lv := range configLevels {
		kindsHere := []string{KindSequential}
		if lv.name == "targets[].probes[]." {
			kindsHere = KindNames()
		}
		for _, key := range names {
			path := lv.name + key
			d, isDoc := docs[path]
			for _, kind := range kindsHere {
				documented := isDoc
				if isDoc && d.kinds != nil {
					documented = contains(d.kinds, kind)
				}
				where := path
				if lv.name == "targets[].probes[]." {
					where = fmt.Sprintf("%s (kind %s)", path, kind)
				}
				switch got := accepted(t, lv, key, kind); {
				case got && !documented:
					t.Errorf("the parser accepts %s, which %s does not document", where, configurationDoc)
				case !got && documented:
					t.Errorf("%s:%d documents %s, which the parser refuses", configurationDoc, d.line, where)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
