package alertstack

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// shortenRuleFile returns a rule file with every `for`, keep_firing_for and group interval
// divided by scale (rounded, at least 1s) and nothing else changed, and a
// line per change. A `for` of 0s stays 0s: an alert that fires at the
// evaluation its condition holds (the file-system page) must do so here
// too. It edits the YAML node tree, so expressions, labels and
// annotations are re-emitted from their parsed values untouched.
func shortenRuleFile(src []byte, scale int) ([]byte, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, nil, fmt.Errorf("parsing rule file: %w", err)
	}
	var changes []string
	groups := mappingValue(doc.Content[0], "groups")
	if groups == nil || groups.Kind != yaml.SequenceNode {
		return nil, nil, errors.New("rule file has no groups list")
	}
	for _, g := range groups.Content {
		// A group's own interval (the slow plateau.causes.day) shrinks like
		// the durations, or it would not evaluate within a test.
		if iv := mappingValue(g, "interval"); iv != nil {
			d, err := model.ParseDuration(iv.Value)
			if err != nil {
				return nil, nil, fmt.Errorf("line %d: interval %q: %w", iv.Line, iv.Value, err)
			}
			short := max(time.Duration(d)/time.Duration(scale), time.Second).Round(time.Second)
			changes = append(changes, fmt.Sprintf("group %s interval: %s -> %s", mappingValue(g, "name").Value, iv.Value, model.Duration(short)))
			iv.Value = model.Duration(short).String()
		}
		rules := mappingValue(g, "rules")
		if rules == nil {
			continue
		}
		for _, r := range rules.Content {
			name := mappingValue(r, "alert")
			for i := 0; i+1 < len(r.Content); i += 2 {
				key, val := r.Content[i].Value, r.Content[i+1]
				if key != "for" && key != "keep_firing_for" {
					continue
				}
				d, err := model.ParseDuration(val.Value)
				if err != nil {
					return nil, nil, fmt.Errorf("line %d: %s %q: %w", val.Line, key, val.Value, err)
				}
				if d == 0 {
					continue
				}
				short := max(time.Duration(d)/time.Duration(scale), time.Second).Round(time.Second)
				changes = append(changes, fmt.Sprintf("%s %s: %s -> %s", name.Value, key, val.Value, model.Duration(short)))
				val.Value = model.Duration(short).String()
			}
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, fmt.Errorf("writing rule file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("writing rule file: %w", err)
	}
	return out.Bytes(), changes, nil
}

// alertForDurations returns the `for` of every alert of a rule file, by
// name (0 where a rule has none).
func alertForDurations(t *testing.T, src []byte) map[string][]time.Duration {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string         `yaml:"alert"`
				For   model.Duration `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(src, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string][]time.Duration{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = append(out[r.Alert], time.Duration(r.For))
			}
		}
	}
	return out
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// checkOnlyDurationsChanged fails unless short is orig with nothing but
// `for`, keep_firing_for and group interval values changed: same groups,
// same rules in the same order, expressions byte for byte.
func checkOnlyDurationsChanged(t *testing.T, name string, orig, short []byte) {
	t.Helper()
	type file struct {
		Groups []map[string]any `yaml:"groups"`
	}
	var a, b file
	if err := yaml.Unmarshal(orig, &a); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := yaml.Unmarshal(short, &b); err != nil {
		t.Fatalf("shortened %s: %v", name, err)
	}
	if len(a.Groups) != len(b.Groups) {
		t.Fatalf("shortened %s has %d groups, the original %d", name, len(b.Groups), len(a.Groups))
	}
	for gi := range a.Groups {
		ra, _ := a.Groups[gi]["rules"].([]any)
		rb, _ := b.Groups[gi]["rules"].([]any)
		if len(ra) != len(rb) {
			t.Fatalf("%s group %d: %d rules shortened, %d originally", name, gi, len(rb), len(ra))
		}
		ga, gb := withoutKeys(a.Groups[gi], "rules", "interval"), withoutKeys(b.Groups[gi], "rules", "interval")
		if !reflect.DeepEqual(ga, gb) {
			t.Fatalf("%s group %d changed: %v -> %v", name, gi, ga, gb)
		}
		for ri := range ra {
			ma, _ := ra[ri].(map[string]any)
			mb, _ := rb[ri].(map[string]any)
			ea, _ := ma["expr"].(string)
			eb, _ := mb["expr"].(string)
			if ea == "" || ea != eb {
				t.Fatalf("%s group %d rule %d: expression changed from %q to %q", name, gi, ri, ea, eb)
			}
			ka, kb := withoutKeys(ma, "for", "keep_firing_for"), withoutKeys(mb, "for", "keep_firing_for")
			if !reflect.DeepEqual(ka, kb) {
				t.Fatalf("%s group %d rule %d changed beyond its durations: %v -> %v", name, gi, ri, ka, kb)
			}
		}
	}
}

func withoutKeys(m map[string]any, keys ...string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}
