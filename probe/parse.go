package probe

import (
	"errors"
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
		return nil, errors.Join(p.Errs...)
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

// servers decodes a target's servers: a non-empty list of unique,
// non-empty names, each the server's part of a target name, and the node
// of each, for errors about the target it makes.
func (p *parser) servers(n *yaml.Node, field string) ([]string, []*yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		p.Errorf(n, field, "must be a list of server names, got %s", yamlfield.Describe(n))
		return nil, nil
	}
	if len(n.Content) == 0 {
		p.Errorf(n, field, "must list at least one server")
		return nil, nil
	}
	var out []string
	var outNodes []*yaml.Node
	seen := map[string]int{}
	for i, sn := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, ok := p.Scalar(sn, f)
		if !ok {
			continue
		}
		switch {
		case s == "":
			p.Errorf(sn, f, "must not be empty")
			continue
		case strings.Contains(s, ServerPlaceholder) || strings.ContainsAny(s, "/\x00"):
			p.Errorf(sn, f, "%q: a server name becomes part of a directory name, it must not contain '/' or %s", s, ServerPlaceholder)
			continue
		}
		if prev, dup := seen[s]; dup {
			p.Errorf(sn, f, "duplicate server %q (first listed at line %d)", s, prev)
			continue
		}
		seen[s] = sn.Line
		out = append(out, s)
		outNodes = append(outNodes, sn)
	}
	return out, outNodes
}

// expandServers makes the targets of a target with servers: one per
// server, named <name>-<server>, its path with ServerPlaceholder replaced,
// its own copy of the probes, and its share of the budgets. The target's
// fleet block covers all of them together (Fleet.Servers), and so does its
// own max_bytes_per_hour, split evenly: the servers' targets are one
// target's probes spread over the servers, and the admin's budgets are
// what that target may move.
func (p *parser) expandServers(t *Target, servers []string, serverNodes []*yaml.Node, field string, nodes map[string]*yaml.Node, names map[string]int) []*Target {
	if len(servers) == 0 {
		return nil
	}
	out := make([]*Target, 0, len(servers))
	for i, s := range servers {
		sf := fmt.Sprintf("%s.servers[%d]", field, serverIndex(nodes["servers"], serverNodes[i]))
		c := *t
		c.Name = t.Name + "-" + s
		c.Path = strings.ReplaceAll(t.Path, ServerPlaceholder, s)
		c.Server, c.ServerGroup = s, t.Name
		c.MaxBytesPerHour = t.MaxBytesPerHour / int64(len(servers))
		if t.MaxBytesPerHour > 0 && c.MaxBytesPerHour == 0 {
			c.MaxBytesPerHour = 1
		}
		c.Probes = make([]*ProbeConfig, len(t.Probes))
		for i, pc := range t.Probes {
			cp := *pc
			c.Probes[i] = &cp
		}
		if t.Fleet != nil {
			f := *t.Fleet
			f.Servers = len(servers)
			c.Fleet = &f
		}
		if t.Name != "" && nameRE.MatchString(t.Name) {
			switch {
			case !nameRE.MatchString(c.Name):
				p.Errorf(serverNodes[i], sf, "server %q makes the target name %q: use letters, digits, '_', '.', '-' (at most 63 in all)", s, c.Name)
			default:
				if prev, dup := names[c.Name]; dup {
					p.Errorf(serverNodes[i], sf, "server %q makes the target name %q, already defined at line %d", s, c.Name, prev)
				}
				names[c.Name] = serverNodes[i].Line
			}
		}
		// Each server's target derives its intervals from its share:
		// the fleet budget over nodes × servers.
		if c.Fleet != nil && len(p.Errs) == 0 {
			if _, err := c.ApplyFleet(c.Fleet.Nodes); err != nil {
				p.Errorf(nodeOr(fleetKey(nodes["fleet"], "max_bytes_per_hour"), nodes["fleet"]), field+".fleet.max_bytes_per_hour", "%v", err)
			}
		}
		out = append(out, &c)
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

// fleet decodes a target's fleet block: nodes (required, at least 1),
// max_bytes_per_hour (the fleet's budget, positive when set) and
// filesystem_plateau (bytes/s, positive when set).
func (p *parser) fleet(n *yaml.Node, field string) *Fleet {
	f := &Fleet{Line: n.Line}
	seen := map[string]bool{}
	p.Mapping(n, field, func(key string, k, v *yaml.Node) {
		kf := field + "." + key
		seen[key] = true
		switch key {
		case "nodes":
			errs := len(p.Errs)
			if f.Nodes = p.Integer(v, kf); f.Nodes < 1 && len(p.Errs) == errs {
				p.Errorf(v, kf, "must be at least 1, got %q", v.Value)
			}
		case "max_bytes_per_hour":
			errs := len(p.Errs)
			if f.MaxBytesPerHour = p.size(v, kf); f.MaxBytesPerHour <= 0 && len(p.Errs) == errs {
				p.Errorf(v, kf, "must be positive, got %q", v.Value)
			}
		case "filesystem_plateau":
			s, ok := p.Scalar(v, kf)
			if !ok {
				return
			}
			r, err := ParseRate(s)
			if err != nil {
				p.Errorf(v, kf, "%v", err)
			}
			f.FilesystemPlateau = r
		default:
			p.Unknown(k, kf)
		}
	})
	if n.Kind == yaml.MappingNode && !seen["nodes"] {
		p.Errorf(n, field+".nodes", "is required (how many nodes run these probes on the file system)")
	}
	return f
}

// serverIndex is the position of a server's node in the servers list.
func serverIndex(list, n *yaml.Node) int {
	for i, c := range list.Content {
		if c == n {
			return i
		}
	}
	return -1
}

// fleetKey is the value node of key in a fleet mapping, or nil.
func fleetKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func (p *parser) probes(n *yaml.Node, field string, defs Defaults) []*ProbeConfig {
	if n.Kind != yaml.SequenceNode {
		p.Errorf(n, field, "must be a list, got %s", yamlfield.Describe(n))
		return nil
	}
	var out []*ProbeConfig
	names := map[string]int{}
	for i, pn := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		pc := p.probe(pn, f, defs)
		if pc == nil {
			continue
		}
		if prev, dup := names[pc.Name]; dup && pc.Name != "" {
			p.Errorf(pn, f+".name", "duplicate probe name %q in this target (first defined at line %d)", pc.Name, prev)
		}
		names[pc.Name] = pn.Line
		out = append(out, pc)
	}
	return out
}

func (p *parser) probe(n *yaml.Node, field string, defs Defaults) *ProbeConfig {
	if n.Kind != yaml.MappingNode {
		p.Errorf(n, field, "must be a mapping, got %s", yamlfield.Describe(n))
		return nil
	}
	pc := &ProbeConfig{Line: n.Line, Interval: defs.Interval, Timeout: defs.Timeout, Splay: defs.Splay}
	// The kind decides which keys are valid, so find it first.
	var spec kindSpec
	var haveKind bool
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" {
			kind := n.Content[i+1].Value
			spec, haveKind = kinds[kind]
			if !haveKind {
				p.Errorf(n.Content[i+1], field+".kind", "unknown probe kind %q (known: %s)", kind, strings.Join(KindNames(), ", "))
				return nil
			}
			pc.Kind = kind
		}
	}
	if !haveKind {
		p.Errorf(n, field+".kind", "is required (one of: %s)", strings.Join(KindNames(), ", "))
		return nil
	}
	spec.setDefaults(pc)
	allowed := map[string]bool{}
	for _, k := range spec.keys {
		allowed[k] = true
	}
	nodes := map[string]*yaml.Node{}
	p.Mapping(n, field, func(key string, k, v *yaml.Node) {
		f := field + "." + key
		nodes[key] = v
		switch key {
		case "name":
			pc.Name = p.Str(v, f)
			return
		case "kind":
			return
		case "interval":
			pc.Interval = p.Duration(v, f)
			return
		case "timeout":
			pc.Timeout = p.Duration(v, f)
			return
		case "splay":
			pc.Splay = p.Boolean(v, f)
			return
		}
		if !allowed[key] {
			if _, known := keyParsers[key]; known {
				p.Errorf(k, f, "does not apply to kind %q (its keys: %s)", pc.Kind, strings.Join(spec.keys, ", "))
			} else {
				p.Unknown(k, f)
			}
			return
		}
		keyParsers[key](p, pc, v, f)
	})
	switch {
	case pc.Name == "":
		p.Errorf(n, field+".name", "is required")
	case !nameRE.MatchString(pc.Name):
		p.Errorf(nodes["name"], field+".name", "%q: use letters, digits, '_', '.', '-' (at most 63)", pc.Name)
	}
	if pc.Interval < minInterval {
		p.Errorf(nodeOr(nodes["interval"], n), field+".interval", "must be at least %s", minInterval)
	}
	if pc.Timeout <= 0 || pc.Timeout >= pc.Interval {
		p.Errorf(nodeOr(nodes["timeout"], n), field+".timeout", "must be positive and shorter than the interval (%s >= %s)", pc.Timeout, pc.Interval)
	}
	for _, fe := range spec.validate(pc) {
		p.Errorf(nodeOr(nodes[fe.key], n), field+"."+fe.key, "%s", fe.msg)
	}
	return pc
}

func nodeOr(n, fallback *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return fallback
}

// keyParsers decode the kind-specific keys; which keys a kind accepts is
// listed in its kindSpec.
var keyParsers = map[string]func(p *parser, pc *ProbeConfig, v *yaml.Node, field string){
	"workers":      func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.Workers = p.Integer(v, f) },
	"file_size":    func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.FileSize = p.size(v, f) },
	"block_size":   func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.BlockSize = p.size(v, f) },
	"segment_size": func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.SegmentSize = p.size(v, f) },
	"queue_depth":  func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.QueueDepth = p.Integer(v, f) },
	"duration":     func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.Duration = p.Duration(v, f) },
	"files":        func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.Files = p.Integer(v, f) },
	"read_after":   func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.ReadAfter = p.Duration(v, f) },
}
