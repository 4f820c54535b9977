package probe

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/probe/internal/yamlfield"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidName reports whether s may name a target or a probe: it becomes part
// of file names and label values.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ParseConfig parses and validates config text; source names it in errors.
// It does not touch the file system.
func ParseConfig(data []byte, source string) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlfield.SyntaxError(data, source, err)
	}
	p := &parser{yamlfield.Decoder{File: source}}
	cfg := &Config{
		Source:   source,
		Defaults: Defaults{Interval: DefaultInterval, Timeout: DefaultTimeout, Splay: true},
	}
	if len(doc.Content) == 0 {
		return nil, &ConfigError{File: source, Msg: "config is empty"}
	}
	root := doc.Content[0]
	var targetsNode *yaml.Node
	p.Mapping(root, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "defaults":
			p.Mapping(v, "defaults", func(key string, k, v *yaml.Node) {
				field := "defaults." + key
				switch key {
				case "interval":
					cfg.Defaults.Interval = p.Duration(v, field)
				case "timeout":
					cfg.Defaults.Timeout = p.Duration(v, field)
				case "splay":
					cfg.Defaults.Splay = p.Boolean(v, field)
				default:
					p.Unknown(k, field)
				}
			})
		case "targets":
			targetsNode = v
		case "baselines_file":
			cfg.BaselinesFile = p.Str(v, key)
		default:
			p.Unknown(k, key)
		}
	})
	if cfg.Defaults.Interval < minInterval {
		p.Errorf(root, "defaults.interval", "must be at least %s", minInterval)
	}
	if cfg.Defaults.Timeout <= 0 {
		p.Errorf(root, "defaults.timeout", "must be positive")
	}
	if targetsNode == nil {
		p.Errorf(root, "targets", "at least one target is required")
	} else {
		cfg.Targets = p.targets(targetsNode, cfg.Defaults)
	}
	if len(p.Errs) > 0 {
		return nil, JoinErrors(p.Errs)
	}
	return cfg, nil
}

// parser decodes the config; the kind-independent field decoding is
// yamlfield's.
type parser struct {
	yamlfield.Decoder
}

func (p *parser) size(n *yaml.Node, field string) int64 {
	s, ok := p.Scalar(n, field)
	if !ok {
		return 0
	}
	v, err := ParseSize(s)
	if err != nil {
		p.Errorf(n, field, "%v", err)
	}
	return v
}

func (p *parser) targets(n *yaml.Node, defs Defaults) []*Target {
	if n.Kind != yaml.SequenceNode {
		p.Errorf(n, "targets", "must be a list, got %s", yamlfield.Describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		p.Errorf(n, "targets", "at least one target is required")
	}
	var out []*Target
	names := map[string]int{}
	for i, tn := range n.Content {
		field := fmt.Sprintf("targets[%d]", i)
		t := &Target{Line: tn.Line, WarningRatio: DefaultWarningRatio, CriticalRatio: DefaultCriticalRatio, WhenJobRunning: WhenJobSkip}
		var probesNode, fleetNode *yaml.Node
		var servers []string
		var serverNodes []*yaml.Node
		nodes := map[string]*yaml.Node{}
		p.Mapping(tn, field, func(key string, k, v *yaml.Node) {
			f := field + "." + key
			nodes[key] = v
			switch key {
			case "name":
				t.Name = p.Str(v, f)
			case "path":
				t.Path = p.Str(v, f)
			case "min_free_ratio":
				t.MinFreeRatio = p.Ratio(v, f)
			case "max_bytes_per_hour":
				t.MaxBytesPerHour = p.size(v, f)
			case "warning_ratio":
				t.WarningRatio = p.Ratio(v, f)
			case "critical_ratio":
				t.CriticalRatio = p.Ratio(v, f)
			case "when_job_running":
				t.WhenJobRunning = p.whenJobRunning(v, f)
			case "probes":
				probesNode = v
			case "fleet":
				fleetNode = v
				t.Fleet = p.fleet(v, f)
			case "servers":
				servers, serverNodes = p.servers(v, f)
			case "serves":
				t.Serves = p.Str(v, f)
			default:
				p.Unknown(k, f)
			}
		})
		if tn.Kind != yaml.MappingNode {
			continue
		}
		switch {
		case t.Name == "":
			p.Errorf(tn, field+".name", "is required")
		case !nameRE.MatchString(t.Name):
			p.Errorf(nodes["name"], field+".name", "%q: use letters, digits, '_', '.', '-' (at most 63)", t.Name)
		case nodes["servers"] == nil:
			if prev, dup := names[t.Name]; dup {
				p.Errorf(nodes["name"], field+".name", "duplicate target name %q (first defined at line %d)", t.Name, prev)
			}
			names[t.Name] = tn.Line
		}
		if t.Path == "" {
			p.Errorf(tn, field+".path", "is required")
		} else if !filepath.IsAbs(t.Path) {
			p.Errorf(nodes["path"], field+".path", "must be an absolute path, got %q", t.Path)
		}
		switch hasPlaceholder := strings.Contains(t.Path, ServerPlaceholder); {
		case nodes["servers"] != nil && !hasPlaceholder && t.Path != "":
			p.Errorf(nodes["path"], field+".path", "must contain %s, which each server's target replaces with the server's name (the directory pinned to that server), got %q", ServerPlaceholder, t.Path)
		case nodes["servers"] == nil && hasPlaceholder:
			p.Errorf(nodes["path"], field+".path", "contains %s but the target has no servers list to replace it with", ServerPlaceholder)
		}
		if v := nodes["serves"]; v != nil && v.Kind == yaml.ScalarNode {
			switch {
			case !nameRE.MatchString(t.Serves):
				p.Errorf(v, field+".serves", "%q: the name of the clients' target of the file system, letters, digits, '_', '.', '-' (at most 63)", t.Serves)
			case t.Serves == t.Name:
				p.Errorf(v, field+".serves", "%q is this target's own name: a server's own target needs a name of its own, or the fleet rules would count the server among the file system's clients", t.Serves)
			case nodes["servers"] != nil:
				p.Errorf(v, field+".serves", "a target with servers is the clients' view of the data servers; serves belongs on a server's own target (its data device), not both")
			}
		}
		if t.CriticalRatio > t.WarningRatio {
			p.Errorf(tn, field+".critical_ratio", "must not exceed warning_ratio (%g > %g)", t.CriticalRatio, t.WarningRatio)
		}
		if probesNode == nil {
			p.Errorf(tn, field+".probes", "at least one probe is required")
		} else {
			t.Probes = p.probes(probesNode, field+".probes", defs)
		}
		// Each node derives its intervals from the fleet budget here, from
		// the config alone, so that the scheduler, /metrics and every
		// command see the same ones.
		if t.Fleet != nil && nodes["servers"] == nil && len(p.Errs) == 0 {
			if _, err := t.ApplyFleet(t.Fleet.Nodes); err != nil {
				p.Errorf(nodeOr(fleetKey(fleetNode, "max_bytes_per_hour"), fleetNode), field+".fleet.max_bytes_per_hour", "%v", err)
			}
		}
		if nodes["servers"] == nil {
			out = append(out, t)
			continue
		}
		out = append(out, p.expandServers(t, servers, serverNodes, field, nodes, names)...)
	}
	return out
}

// whenJobRunning decodes when_job_running: skip or run, nothing else.
func (p *parser) whenJobRunning(n *yaml.Node, field string) string {
	s, ok := p.Scalar(n, field)
	if !ok {
		return WhenJobSkip
	}
	switch s {
	case WhenJobSkip, WhenJobRun:
		return s
	}
	p.Errorf(n, field, "must be %s or %s, got %q", WhenJobSkip, WhenJobRun, s)
	return WhenJobSkip
}

func nodeOr(n, fallback *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return fallback
}
