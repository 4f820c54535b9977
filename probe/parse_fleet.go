package probe

// The parts of a target that span more than this node: a target spread over
// data servers (servers:, one target per server) and the fleet block (the
// nodes that share a budget and a file-system plateau).

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/probe/internal/yamlfield"
)

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
