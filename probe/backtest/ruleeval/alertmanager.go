package ruleeval

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"go.yaml.in/yaml/v3"
)

// Notifier counts what Alertmanager would send for the alerts that fire:
// the shipped alertmanager.yml's inhibitions, and its root route's
// grouping, one notification per group. It reads only what decides the
// count (group_by, inhibit_rules): timing (group_wait, group_interval,
// repeat_interval) delays and repeats notifications without changing
// which groups notify during an incident, and the shipped file has one
// route. Alertmanager itself is no dependency of the exporter; the
// integration tests hold the same file against a real Alertmanager.
type Notifier struct {
	groupBy []string
	inhibit []inhibitRule
}

type inhibitRule struct {
	source, target []*labels.Matcher
	equal          []string
}

// amConfig is the part of alertmanager.yml the notifier reads.
type amConfig struct {
	Route struct {
		GroupBy []string `yaml:"group_by"`
	} `yaml:"route"`
	InhibitRules []struct {
		SourceMatchers []string `yaml:"source_matchers"`
		TargetMatchers []string `yaml:"target_matchers"`
		Equal          []string `yaml:"equal"`
	} `yaml:"inhibit_rules"`
}

// matcherSyntax is Alertmanager's matcher: name, operator, value, the
// value quoted or not.
var matcherSyntax = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^"\s]*))\s*$`)

func LoadNotifier(path string) (*Notifier, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("backtest: Alertmanager configuration: %w", err)
	}
	return ParseNotifier(data, path)
}

// ParseNotifier reads the grouping and inhibitions of an Alertmanager
// configuration; path names it in errors.
func ParseNotifier(data []byte, path string) (*Notifier, error) {
	var c amConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("backtest: %s: %w", path, err)
	}
	n := &Notifier{groupBy: c.Route.GroupBy}
	parse := func(i int, field string, ms []string) ([]*labels.Matcher, error) {
		var out []*labels.Matcher
		for _, m := range ms {
			parts := matcherSyntax.FindStringSubmatch(m)
			if parts == nil {
				return nil, fmt.Errorf("backtest: %s: inhibit_rules[%d].%s: %q is not a matcher (name=\"value\", =~, !=, !~)", path, i, field, m)
			}
			value := parts[3] + parts[4]
			value = strings.ReplaceAll(strings.ReplaceAll(value, `\"`, `"`), `\\`, `\`)
			typ := map[string]labels.MatchType{"=": labels.MatchEqual, "!=": labels.MatchNotEqual, "=~": labels.MatchRegexp, "!~": labels.MatchNotRegexp}[parts[2]]
			lm, err := labels.NewMatcher(typ, parts[1], value)
			if err != nil {
				return nil, fmt.Errorf("backtest: %s: inhibit_rules[%d].%s: %q: %w", path, i, field, m, err)
			}
			out = append(out, lm)
		}
		return out, nil
	}
	for i, r := range c.InhibitRules {
		src, err := parse(i, "source_matchers", r.SourceMatchers)
		if err != nil {
			return nil, err
		}
		tgt, err := parse(i, "target_matchers", r.TargetMatchers)
		if err != nil {
			return nil, err
		}
		n.inhibit = append(n.inhibit, inhibitRule{source: src, target: tgt, equal: r.Equal})
	}
	return n, nil
}

// Groups are the notification Groups of the firing alerts that no other
// firing alert inhibits. As in Alertmanager, an alert that matches both
// sides of a rule does not inhibit itself, and a missing label is equal
// to an empty one.
func (n *Notifier) Groups(firing []labels.Labels) []string {
	var out []string
	for i, a := range firing {
		inhibited := false
		for _, r := range n.inhibit {
			if !matchesAll(a, r.target) {
				continue
			}
			for j, s := range firing {
				if j == i || !matchesAll(s, r.source) {
					continue
				}
				equal := true
				for _, l := range r.equal {
					if s.Get(l) != a.Get(l) {
						equal = false
						break
					}
				}
				if equal {
					inhibited = true
					break
				}
			}
			if inhibited {
				break
			}
		}
		if inhibited {
			continue
		}
		var key []string
		for _, l := range n.groupBy {
			key = append(key, l+"="+a.Get(l))
		}
		k := strings.Join(key, ",")
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}
