package plateau

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/internal/yamlfield"
)

// baselinesDecoder decodes the baselines file.
type baselinesDecoder struct {
	yamlfield.Decoder
}

// LoadBaselines reads a baselines file. Errors name file, line and field.
func LoadBaselines(path string) (*Baselines, error) {
	data, err := probe.ReadFileLimited(path, probe.MaxBaselinesBytes)
	if err != nil {
		return nil, fmt.Errorf("baselines: %w", err)
	}
	return ParseBaselines(data, path)
}

// ParseBaselines parses baselines text. The format:
//
//	targets:
//	  scratch:
//	    seq:
//	      kind: sequential
//	      params: sequential workers=1 file_size=256MiB block_size=8MiB
//	      direct: true
//	      engine: sync
//	      host: node001
//	      measured_at: 2026-11-30T10:00:00Z
//	      method: characterize --runs 5
//	      min_file_size: 16MiB
//	      ops:
//	        write: {bytes_per_second: 1.2e9, spread: 0.03, runs: 5}
//	        read: {bytes_per_second: 2.1e9, spread: 0.02, runs: 5}
//
// min_file_size (sequential), min_segment_size (shared_file), min_files
// (metadata) or min_duration (random) is the smallest size that measured
// the plateau on this target, written by characterize --size-sweep; only
// the probe kind's own key is accepted, in the config's syntax for it.
func ParseBaselines(data []byte, source string) (*Baselines, error) {
	doc, err := yamlfield.Parse(data, source)
	if err != nil {
		return nil, err
	}
	out := NewBaselines()
	out.Source = source
	if len(doc.Content) == 0 {
		return out, nil
	}
	p := &baselinesDecoder{yamlfield.Decoder{File: source}}
	p.Mapping(doc.Content[0], "", func(key string, k, v *yaml.Node) {
		if key != "targets" {
			p.Unknown(k, key)
			return
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return // "targets:" with nothing under it: no baselines yet
		}
		p.Mapping(v, "targets", func(target string, _, tv *yaml.Node) {
			p.Mapping(tv, "targets."+target, func(name string, _, pv *yaml.Node) {
				p.probe(out, target, name, pv)
			})
		})
	})
	if len(p.Errs) > 0 {
		return nil, errors.Join(p.Errs...)
	}
	return out, nil
}

func (p *baselinesDecoder) probe(out *Baselines, target, name string, n *yaml.Node) {
	field := "targets." + target + "." + name
	common := Baseline{}
	var opsNode, sizeNode *yaml.Node
	sizeKey := ""
	p.Mapping(n, field, func(key string, k, v *yaml.Node) {
		f := field + "." + key
		if isMinSizeKey(key) {
			// Checked against the kind once every key is read: the kind
			// may come after it.
			if sizeNode != nil {
				p.Errorf(k, f, "give one smallest good size, not %s and %s", sizeKey, key)
				return
			}
			sizeNode, sizeKey = v, key
			return
		}
		switch key {
		case "kind":
			common.Kind = p.Str(v, f)
			if !probe.KnownKind(common.Kind) {
				p.Errorf(v, f, "unknown probe kind %q", common.Kind)
			}
		case "params":
			common.Params = p.Str(v, f)
		case "direct":
			switch d := p.Str(v, f); d {
			case "true", "false":
				common.Direct = d
			default:
				p.Errorf(v, f, "must be true or false, got %q", d)
			}
		case "engine":
			common.Engine = p.Str(v, f)
			if !slices.Contains(probe.Engines(), common.Engine) {
				p.Errorf(v, f, "unknown engine %q (one of %s)", common.Engine, strings.Join(probe.Engines(), ", "))
			}
		case "host":
			common.Host = p.Str(v, f)
		case "method":
			common.Method = p.Str(v, f)
		case "measured_at":
			// Any YAML timestamp: a file edited with a YAML tool keeps its
			// times in whatever form that tool writes (PyYAML:
			// 2026-12-01 08:52:31+00:00). Marshal writes RFC 3339 in UTC.
			common.MeasuredAt = p.Timestamp(v, f)
		case "ops":
			opsNode = v
		default:
			p.Unknown(k, f)
		}
	})
	if n.Kind != yaml.MappingNode {
		return
	}
	if common.Kind == "" {
		p.Errorf(n, field+".kind", "is required")
		return
	}
	if opsNode == nil {
		p.Errorf(n, field+".ops", "at least one op is required")
		return
	}
	// "ops: {}" is as empty as no ops: a probe with nothing to compare
	// would vanish on the next write, taking its smallest good size along.
	if opsNode.Kind == yaml.MappingNode && len(opsNode.Content) == 0 {
		p.Errorf(opsNode, field+".ops", "at least one op is required")
		return
	}
	if sizeNode != nil {
		p.minSize(out, target, name, common.Kind, sizeKey, sizeNode, field+"."+sizeKey)
	}
	p.Mapping(opsNode, field+".ops", func(op string, k, v *yaml.Node) {
		f := field + ".ops." + op
		if !slices.Contains(probe.OpsOf(common.Kind), op) {
			p.Errorf(k, f, "kind %s has no op %q (its ops: %s)", common.Kind, op, strings.Join(probe.OpsOf(common.Kind), ", "))
			return
		}
		e := common
		e.Line = v.Line
		p.Mapping(v, f, func(key string, k, v *yaml.Node) {
			ff := f + "." + key
			switch key {
			case probe.UnitBytesPerSecond, probe.UnitOpsPerSecond:
				if e.Unit != "" {
					p.Errorf(k, ff, "give one of bytes_per_second and operations_per_second")
				}
				e.Unit = key
				e.Value = p.NonNegative(v, ff)
			case "spread":
				e.Spread = p.NonNegative(v, ff)
			case "runs":
				e.Runs = p.Integer(v, ff)
			default:
				p.Unknown(k, ff)
			}
		})
		if e.Unit == "" {
			p.Errorf(v, f, "needs bytes_per_second or operations_per_second")
			return
		}
		out.Entries[BaselineKey{target, name, op}] = &e
	})
}

// minSize reads a probe's min_<key>: the key must be its kind's, and the
// value one the config accepts for that key.
func (p *baselinesDecoder) minSize(out *Baselines, target, name, kind, key string, v *yaml.Node, field string) {
	if want := MinSizeKey(kind); key != want {
		p.Errorf(v, field, "does not apply to kind %s (its smallest good size is %s)", kind, want)
		return
	}
	s, ok := p.Scalar(v, field)
	if !ok {
		return
	}
	size, err := ParseProbeSize(kind, s)
	if err != nil {
		p.Errorf(v, field, "%v", err)
		return
	}
	out.SetMinSize(target, name, MinSize{Kind: kind, Key: SizeKey(kind), Value: size, Line: v.Line})
}

// Marshal renders the baselines in the file format, sorted, with a header.
func (b *Baselines) Marshal() []byte {
	type probeKey struct{ target, probe string }
	groups := map[probeKey][]BaselineKey{}
	for k := range b.Entries {
		pk := probeKey{k.Target, k.Probe}
		groups[pk] = append(groups[pk], k)
	}
	keys := make([]probeKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].target != keys[j].target {
			return keys[i].target < keys[j].target
		}
		return keys[i].probe < keys[j].probe
	})
	var sb strings.Builder
	sb.WriteString("# plateau_exporter baselines: what each probe achieves on a known-good system.\n")
	sb.WriteString("# Written by `plateau_exporter characterize`; entries may be edited or added by hand\n")
	sb.WriteString("# (leave out params to apply an entry whatever the probe's parameters).\n")
	if len(keys) == 0 {
		sb.WriteString("targets: {}\n")
		return []byte(sb.String())
	}
	sb.WriteString("targets:\n")
	lastTarget := ""
	for _, pk := range keys {
		if pk.target != lastTarget {
			fmt.Fprintf(&sb, "  %s:\n", pk.target)
			lastTarget = pk.target
		}
		ops := groups[pk]
		first := b.Entries[ops[0]]
		fmt.Fprintf(&sb, "    %s:\n      kind: %s\n", pk.probe, first.Kind)
		if first.Params != "" {
			fmt.Fprintf(&sb, "      params: %s\n", first.Params)
		}
		if first.Direct != "" {
			fmt.Fprintf(&sb, "      direct: %s\n", first.Direct)
		}
		if first.Engine != "" {
			fmt.Fprintf(&sb, "      engine: %s\n", first.Engine)
		}
		if first.Host != "" {
			fmt.Fprintf(&sb, "      host: %s\n", first.Host)
		}
		if !first.MeasuredAt.IsZero() {
			fmt.Fprintf(&sb, "      measured_at: %s\n", first.MeasuredAt.UTC().Format(time.RFC3339))
		}
		if first.Method != "" {
			fmt.Fprintf(&sb, "      method: %q\n", first.Method)
		}
		if m, ok := b.MinSizes[ProbeKey{pk.target, pk.probe}]; ok && m.Kind == first.Kind {
			fmt.Fprintf(&sb, "      %s: %s\n", MinSizeKey(m.Kind), m)
		}
		sb.WriteString("      ops:\n")
		order := probe.OpsOf(first.Kind)
		sort.Slice(ops, func(i, j int) bool { return opIndex(order, ops[i].Op) < opIndex(order, ops[j].Op) })
		for _, k := range ops {
			e := b.Entries[k]
			fmt.Fprintf(&sb, "        %s: {%s: %s, spread: %s, runs: %d}\n", k.Op, e.Unit,
				yamlfield.Float(e.Value, 6), yamlfield.Float(e.Spread, 3), e.Runs)
		}
	}
	return []byte(sb.String())
}

func writeBackup(path string, data []byte) (string, error) {
	stamp := path + "." + time.Now().UTC().Format("20060102T150405.000000000Z")
	for i := 0; ; i++ {
		name := stamp + ".bak"
		if i > 0 {
			name = fmt.Sprintf("%s-%d.bak", stamp, i)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return "", err
		}
		return name, f.Close()
	}
}

// opIndex is s's place in an op order; ops not in it sort last.
func opIndex(list []string, s string) int {
	if i := slices.Index(list, s); i >= 0 {
		return i
	}
	return len(list)
}

// Write saves the baselines atomically (temporary file, fsync, rename). An
// existing file is first kept as <path>.<UTC time>.bak, whose name it
// returns; the backup is created exclusively, so two writes in the same
// instant never overwrite an older backup.
func (b *Baselines) Write(path string) (backup string, err error) {
	if old, err := os.ReadFile(path); err == nil {
		backup, err = writeBackup(path, old)
		if err != nil {
			return "", fmt.Errorf("back up %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".baselines-*.yml")
	if err != nil {
		return backup, fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Marshal()); err != nil {
		tmp.Close()
		return backup, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return backup, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return backup, err
	}
	if err := tmp.Close(); err != nil {
		return backup, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return backup, fmt.Errorf("write %s: %w", path, err)
	}
	return backup, nil
}
