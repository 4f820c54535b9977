package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// A baseline is what a probe achieves on a known-good system: the plateau
// its results are compared with. Baselines live in their own file, written
// by `plateau_exporter characterize` and editable by hand, apart from the
// hand-written config. Each records the probe parameters it was measured
// with, because a baseline for 1 MiB blocks says nothing about 8 MiB blocks.

// Units of a baseline value.
const (
	UnitBytesPerSecond = "bytes_per_second"
	UnitOpsPerSecond   = "operations_per_second"
)

// BaselineKey names one op of one probe of one target.
type BaselineKey struct {
	Target, Probe, Op string
}

// Baseline is the plateau of one op.
type Baseline struct {
	Kind string
	// Unit is UnitBytesPerSecond or UnitOpsPerSecond.
	Unit  string
	Value float64
	// Spread is the relative spread of the runs the value is the median of:
	// (max - min) / (2 * median). 0 when unknown or hand-written.
	Spread     float64
	Runs       int
	Method     string
	MeasuredAt time.Time
	Host       string
	// Params is ProbeParams of the probe as measured; empty on hand-written
	// entries, which then apply whatever the parameters.
	Params string
	// Direct ("true" or "false") and Engine say how the measured runs did
	// their I/O, as the labels of plateau_probe_info do. They are outcomes
	// of a run, not configuration: the random probe falls back from libaio
	// to goroutines when the node's AIO contexts run out (fs.aio-max-nr),
	// and a run that went through the page cache measures something else
	// than a direct one. Empty (hand-written entries, older files) applies
	// the baseline whatever the mode.
	Direct, Engine string
	Line           int
}

// Baselines is the parsed baselines file.
type Baselines struct {
	Entries map[BaselineKey]*Baseline
	Source  string
}

// NewBaselines returns an empty set.
func NewBaselines() *Baselines { return &Baselines{Entries: map[BaselineKey]*Baseline{}} }

// OpUnit is the unit an op's baseline is kept in: throughput for
// sequential and shared-file data, operation rates for random I/O (IOPS)
// and metadata, as the published characterizations report them.
func OpUnit(kind string) string {
	switch kind {
	case KindSequential, KindSharedFile:
		return UnitBytesPerSecond
	}
	return UnitOpsPerSecond
}

// Value is an op's result in the given unit.
func (o *OpResult) Value(unit string) float64 {
	if unit == UnitBytesPerSecond {
		return o.BytesPerSecond()
	}
	return o.OperationsPerSecond()
}

// ProbeParams fingerprints the parameters that decide what a probe
// measures (not its schedule), e.g. "sequential workers=1 file_size=256MiB
// block_size=8MiB".
func ProbeParams(p *ProbeConfig) string {
	parts := []string{p.Kind}
	add := func(k string, v string) { parts = append(parts, k+"="+v) }
	for _, k := range kinds[p.Kind].keys {
		switch k {
		case "workers":
			add(k, strconv.Itoa(p.Workers))
		case "file_size":
			add(k, FormatSize(p.FileSize))
		case "block_size":
			add(k, FormatSize(p.BlockSize))
		case "segment_size":
			add(k, FormatSize(p.SegmentSize))
		case "queue_depth":
			add(k, strconv.Itoa(p.QueueDepth))
		case "duration":
			add(k, p.Duration.String())
		case "files":
			add(k, strconv.Itoa(p.Files))
		case "read_after":
			if p.ReadAfter > 0 {
				add(k, p.ReadAfter.String())
			}
		}
	}
	return strings.Join(parts, " ")
}

// ModeMismatch says how a run did its I/O differently from the runs the
// baseline was measured with, or "" when it did not (or the baseline does
// not record it). Such a run is not compared with the plateau.
func (b *Baseline) ModeMismatch(r *Result) string {
	var diffs []string
	if got := strconv.FormatBool(r.Direct); b.Direct != "" && b.Direct != got {
		diffs = append(diffs, "direct="+got+" (baseline direct="+b.Direct+")")
	}
	if b.Engine != "" && b.Engine != r.Engine {
		diffs = append(diffs, "engine="+r.Engine+" (baseline engine="+b.Engine+")")
	}
	if len(diffs) == 0 {
		return ""
	}
	return "run used " + strings.Join(diffs, ", ")
}

// For returns the baseline that applies to an op of a configured probe, or
// nil with a reason when there is none or it was measured differently.
func (b *Baselines) For(target string, p *ProbeConfig, op string) (*Baseline, string) {
	if b == nil {
		return nil, "no baselines loaded"
	}
	e := b.Entries[BaselineKey{target, p.Name, op}]
	switch {
	case e == nil:
		return nil, "no baseline"
	case e.Kind != p.Kind:
		return nil, fmt.Sprintf("baseline is for kind %s", e.Kind)
	case e.Params != "" && e.Params != ProbeParams(p):
		return nil, fmt.Sprintf("baseline measured with %q, probe now runs %q", e.Params, ProbeParams(p))
	}
	return e, ""
}

// LoadBaselines reads a baselines file. Errors name file, line and field.
func LoadBaselines(path string) (*Baselines, error) {
	data, err := os.ReadFile(path)
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
//	      ops:
//	        write: {bytes_per_second: 1.2e9, spread: 0.03, runs: 5}
//	        read: {bytes_per_second: 2.1e9, spread: 0.02, runs: 5}
func ParseBaselines(data []byte, source string) (*Baselines, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{File: source, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := NewBaselines()
	out.Source = source
	if len(doc.Content) == 0 {
		return out, nil
	}
	p := &parser{file: source}
	p.mapping(doc.Content[0], "", func(key string, k, v *yaml.Node) {
		if key != "targets" {
			p.unknown(k, key)
			return
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return // "targets:" with nothing under it: no baselines yet
		}
		p.mapping(v, "targets", func(target string, _, tv *yaml.Node) {
			p.mapping(tv, "targets."+target, func(probe string, _, pv *yaml.Node) {
				p.baselineProbe(out, target, probe, pv)
			})
		})
	})
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return out, nil
}

func (p *parser) baselineProbe(out *Baselines, target, probe string, n *yaml.Node) {
	field := "targets." + target + "." + probe
	common := Baseline{}
	var opsNode *yaml.Node
	p.mapping(n, field, func(key string, k, v *yaml.Node) {
		f := field + "." + key
		switch key {
		case "kind":
			common.Kind = p.str(v, f)
			if _, ok := kinds[common.Kind]; !ok {
				p.errorf(v, f, "unknown probe kind %q", common.Kind)
			}
		case "params":
			common.Params = p.str(v, f)
		case "direct":
			switch d := p.str(v, f); d {
			case "true", "false":
				common.Direct = d
			default:
				p.errorf(v, f, "must be true or false, got %q", d)
			}
		case "engine":
			common.Engine = p.str(v, f)
			if !contains(probeEngines, common.Engine) {
				p.errorf(v, f, "unknown engine %q (one of %s)", common.Engine, strings.Join(probeEngines, ", "))
			}
		case "host":
			common.Host = p.str(v, f)
		case "method":
			common.Method = p.str(v, f)
		case "measured_at":
			s := p.str(v, f)
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				p.errorf(v, f, "invalid time %q (RFC 3339, e.g. 2026-11-30T10:00:00Z)", s)
			}
			common.MeasuredAt = t
		case "ops":
			opsNode = v
		default:
			p.unknown(k, f)
		}
	})
	if n.Kind != yaml.MappingNode {
		return
	}
	if common.Kind == "" {
		p.errorf(n, field+".kind", "is required")
		return
	}
	if opsNode == nil {
		p.errorf(n, field+".ops", "at least one op is required")
		return
	}
	p.mapping(opsNode, field+".ops", func(op string, k, v *yaml.Node) {
		f := field + ".ops." + op
		if !contains(kinds[common.Kind].ops, op) {
			p.errorf(k, f, "kind %s has no op %q (its ops: %s)", common.Kind, op, strings.Join(kinds[common.Kind].ops, ", "))
			return
		}
		e := common
		e.Line = v.Line
		p.mapping(v, f, func(key string, k, v *yaml.Node) {
			ff := f + "." + key
			switch key {
			case UnitBytesPerSecond, UnitOpsPerSecond:
				if e.Unit != "" {
					p.errorf(k, ff, "give one of bytes_per_second and operations_per_second")
				}
				e.Unit = key
				e.Value = p.positiveFloat(v, ff)
			case "spread":
				e.Spread = p.positiveFloat(v, ff)
			case "runs":
				e.Runs = p.integer(v, ff)
			default:
				p.unknown(k, ff)
			}
		})
		if e.Unit == "" {
			p.errorf(v, f, "needs bytes_per_second or operations_per_second")
			return
		}
		out.Entries[BaselineKey{target, probe, op}] = &e
	})
}

func (p *parser) positiveFloat(n *yaml.Node, field string) float64 {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v != v {
		p.errorf(n, field, "must be a non-negative number, got %q", s)
		return 0
	}
	return v
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
		sb.WriteString("      ops:\n")
		order := kinds[first.Kind].ops
		sort.Slice(ops, func(i, j int) bool { return indexOf(order, ops[i].Op) < indexOf(order, ops[j].Op) })
		for _, k := range ops {
			e := b.Entries[k]
			fmt.Fprintf(&sb, "        %s: {%s: %s, spread: %s, runs: %d}\n", k.Op, e.Unit,
				strconv.FormatFloat(e.Value, 'g', 6, 64), strconv.FormatFloat(e.Spread, 'g', 3, 64), e.Runs)
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

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
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
