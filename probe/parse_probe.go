package probe

// A target's probes: the list, each probe's common keys, and the decoding
// of the kind-specific keys its kind accepts (kinds.go lists which).

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/probe/internal/yamlfield"
)

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
