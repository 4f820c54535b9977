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
// the shipped alertmanager.yml's inhibitions, its root route's grouping,
// one notification per group, and its child routes to a receiver with no
// integration (the "null" receiver of an alert that only inhibits, as
// kube-prometheus routes its InfoInhibitor), whose alerts notify no one
// but still inhibit. It reads only what decides the count (group_by,
// routes' matchers and receivers, inhibit_rules): timing (group_wait,
// group_interval, repeat_interval) delays and repeats notifications
// without changing which groups notify during an incident. Alertmanager
// itself is no dependency of the exporter; the integration tests hold
// the same file against a real Alertmanager.
type Notifier struct {
	groupBy []string
	inhibit []inhibitRule
	// routes are the root route's children in order; the first whose
	// matchers all match an alert takes it, and silent says its receiver
	// has no integration.
	routes []childRoute
}

type childRoute struct {
	matchers []*labels.Matcher
	silent   bool
}

type inhibitRule struct {
	source, target []*labels.Matcher
	equal          []string
}

// amConfig is the part of alertmanager.yml the notifier reads.
type amConfig struct {
	Route struct {
		Receiver string   `yaml:"receiver"`
		GroupBy  []string `yaml:"group_by"`
		Routes   []struct {
			Receiver string   `yaml:"receiver"`
			Matchers []string `yaml:"matchers"`
		} `yaml:"routes"`
	} `yaml:"route"`
	// Receivers are read as maps: a receiver with no key but its name has
	// no integration.
	Receivers    []map[string]any `yaml:"receivers"`
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
	parse := func(field string, ms []string) ([]*labels.Matcher, error) {
		var out []*labels.Matcher
		for _, m := range ms {
			parts := matcherSyntax.FindStringSubmatch(m)
			if parts == nil {
				return nil, fmt.Errorf("backtest: %s: %s: %q is not a matcher (name=\"value\", =~, !=, !~)", path, field, m)
			}
			value := parts[3] + parts[4]
			value = strings.ReplaceAll(strings.ReplaceAll(value, `\"`, `"`), `\\`, `\`)
			typ := map[string]labels.MatchType{"=": labels.MatchEqual, "!=": labels.MatchNotEqual, "=~": labels.MatchRegexp, "!~": labels.MatchNotRegexp}[parts[2]]
			lm, err := labels.NewMatcher(typ, parts[1], value)
			if err != nil {
				return nil, fmt.Errorf("backtest: %s: %s: %q: %w", path, field, m, err)
			}
			out = append(out, lm)
		}
		return out, nil
	}
	for i, r := range c.InhibitRules {
		src, err := parse(fmt.Sprintf("inhibit_rules[%d].source_matchers", i), r.SourceMatchers)
		if err != nil {
			return nil, err
		}
		tgt, err := parse(fmt.Sprintf("inhibit_rules[%d].target_matchers", i), r.TargetMatchers)
		if err != nil {
			return nil, err
		}
		n.inhibit = append(n.inhibit, inhibitRule{source: src, target: tgt, equal: r.Equal})
	}
	integrated := map[string]bool{}
	for _, r := range c.Receivers {
		name, _ := r["name"].(string)
		integrated[name] = len(r) > 1
	}
	for i, r := range c.Route.Routes {
		ms, err := parse(fmt.Sprintf("route.routes[%d].matchers", i), r.Matchers)
		if err != nil {
			return nil, err
		}
		// The root's receiver always counts: the shipped file leaves its
		// integration to the site.
		silent := r.Receiver != "" && r.Receiver != c.Route.Receiver && !integrated[r.Receiver]
		n.routes = append(n.routes, childRoute{matchers: ms, silent: silent})
	}
	return n, nil
}

// silent says whether alert a goes to a receiver with no integration.
func (n *Notifier) silent(a labels.Labels) bool {
	for _, r := range n.routes {
		if matchesAll(a, r.matchers) {
			return r.silent
		}
	}
	return false
}

// GroupAlerts is one notification group's firing alerts at one
// evaluation, each named by its labels: all of them, and those Sent,
// which no other firing alert inhibits (what Alertmanager passes to the
// receiver).
type GroupAlerts struct {
	Key          string
	Firing, Sent []string
}

// Route groups the firing alerts as Alertmanager would, in the order of
// their first alert. As in Alertmanager, an alert that matches both
// sides of an inhibition does not inhibit itself, and a missing label is
// equal to an empty one. Alerts routed to a receiver with no integration
// are left out: they notify no one, and only inhibit.
func (n *Notifier) Route(firing []labels.Labels) []GroupAlerts {
	var out []GroupAlerts
	for i, a := range firing {
		if n.silent(a) {
			continue
		}
		var key []string
		for _, l := range n.groupBy {
			key = append(key, l+"="+a.Get(l))
		}
		k := strings.Join(key, ",")
		gi := slices.IndexFunc(out, func(g GroupAlerts) bool { return g.Key == k })
		if gi < 0 {
			out = append(out, GroupAlerts{Key: k})
			gi = len(out) - 1
		}
		g := &out[gi]
		id := a.String()
		if slices.Contains(g.Firing, id) {
			continue
		}
		g.Firing = append(g.Firing, id)
		if !n.inhibited(a, i, firing) {
			g.Sent = append(g.Sent, id)
		}
	}
	return out
}

// inhibited says whether another firing alert than firing[i], a,
// inhibits a.
func (n *Notifier) inhibited(a labels.Labels, i int, firing []labels.Labels) bool {
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
				return true
			}
		}
	}
	return false
}

// Groups are the keys of the notification groups that have an alert to
// send (Route).
func (n *Notifier) Groups(firing []labels.Labels) []string {
	var out []string
	for _, g := range n.Route(firing) {
		if len(g.Sent) > 0 {
			out = append(out, g.Key)
		}
	}
	return out
}
