// Package probe owns plateau_exporter's probes: the YAML configuration, the
// scheduler that runs each probe in its own time slot, the child-process
// isolation that keeps a hung file system away from the daemon, the probe
// kinds themselves, the safety rules of the probe directory, and the store
// of results that scrapes read.
package probe

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults of the design's config contract.
const (
	DefaultInterval      = 15 * time.Minute
	DefaultTimeout       = 2 * time.Minute
	DefaultWarningRatio  = 0.8
	DefaultCriticalRatio = 0.5
	minInterval          = time.Second
	// EmbeddedSource names the built-in config in messages and metrics.
	EmbeddedSource = "embedded default"
)

// Config is the parsed, validated configuration.
type Config struct {
	Defaults      Defaults
	Targets       []*Target
	BaselinesFile string
	// Source is the file the config came from, or EmbeddedSource.
	Source string
}

// Defaults apply to every probe that does not set its own value.
type Defaults struct {
	Interval time.Duration
	Timeout  time.Duration
	Splay    bool
}

// Target is one directory on a file system under test.
type Target struct {
	Name            string
	Path            string
	MinFreeRatio    float64
	MaxBytesPerHour int64
	WarningRatio    float64
	CriticalRatio   float64
	Probes          []*ProbeConfig
	Line            int
	// CreatePath lets the embedded default create its temp directory; a
	// configured path must already exist, because creating it could put the
	// probe on the wrong file system when a mount is missing.
	CreatePath bool
}

// ProbeConfig is one probe of a target. It travels to the worker process as
// JSON, so every field the probe needs is exported.
type ProbeConfig struct {
	Name        string        `json:"name"`
	Kind        string        `json:"kind"`
	Workers     int           `json:"workers,omitempty"`
	FileSize    int64         `json:"file_size,omitempty"`
	BlockSize   int64         `json:"block_size,omitempty"`
	SegmentSize int64         `json:"segment_size,omitempty"`
	QueueDepth  int           `json:"queue_depth,omitempty"`
	Duration    time.Duration `json:"duration,omitempty"`
	Files       int           `json:"files,omitempty"`
	ReadAfter   time.Duration `json:"read_after,omitempty"`
	Interval    time.Duration `json:"interval"`
	Timeout     time.Duration `json:"timeout"`
	Splay       bool          `json:"splay"`
	Line        int           `json:"-"`
}

// ConfigError is one problem in a config file, located by line and field.
type ConfigError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", loc, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
}

//go:embed default.yml
var embeddedDefault []byte

// EmbeddedDefaultYAML returns the built-in config text, with the temp
// directory filled in.
func EmbeddedDefaultYAML() []byte {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("plateau_exporter-%d", os.Geteuid()))
	return bytes.ReplaceAll(embeddedDefault, []byte("@TEMPDIR@"), []byte(path))
}

// LoadEmbedded parses the built-in default config.
func LoadEmbedded() (*Config, error) {
	cfg, err := ParseConfig(EmbeddedDefaultYAML(), EmbeddedSource)
	if err != nil {
		return nil, err
	}
	for _, t := range cfg.Targets {
		t.CreatePath = true
	}
	return cfg, nil
}

// LoadConfigFile reads, parses and validates a config file, including that
// each target's path is an existing directory.
func LoadConfigFile(path string) (*Config, error) {
	cfg, err := ReadConfigFile(path)
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckPaths(PathCheckDeadline); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ReadConfigFile reads, parses and validates a config file without looking
// at the target paths: the daemon starts before the parallel file systems
// are mounted at boot, and runs on while one is unmounted (see CheckPaths).
func ReadConfigFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(data, path)
}

// PathCheckDeadline bounds the check of each target path.
const PathCheckDeadline = 5 * time.Second

// CheckPaths verifies that every target path is an existing directory. A
// stat on a hung mount can block forever, so each runs with a deadline; a
// path that does not answer in time is reported as an error too, because a
// daemon started on a hung mount would only ever time out.
func (c *Config) CheckPaths(deadline time.Duration) error {
	return new(PathChecker).Check(c, deadline)
}

// PathChecker checks target paths and remembers the checks that never
// returned. A stat on a hung mount holds a thread in the kernel until the
// mount recovers; the daemon checks its paths again on every reload, and
// without this each SIGHUP during an outage would block one more thread.
// A path whose earlier check is still blocked is reported hung at once.
type PathChecker struct {
	mu      sync.Mutex
	blocked map[string]bool
	// stat is os.Stat; tests replace it to block.
	stat func(string) (os.FileInfo, error)
}

// Check is CheckPaths with the checker's memory of blocked paths.
func (pc *PathChecker) Check(c *Config, deadline time.Duration) error {
	var errs []error
	for i, t := range c.Targets {
		if t.CreatePath {
			continue
		}
		field := fmt.Sprintf("targets[%d].path", i)
		if err := pc.statDir(t.Path, deadline); err != nil {
			errs = append(errs, &ConfigError{File: c.Source, Line: t.Line, Field: field, Msg: err.Error()})
		}
	}
	return errors.Join(errs...)
}

func (pc *PathChecker) statDir(path string, deadline time.Duration) error {
	pc.mu.Lock()
	if pc.blocked[path] {
		pc.mu.Unlock()
		return fmt.Errorf("stat %s has not answered since an earlier check (hung mount?)", path)
	}
	if pc.blocked == nil {
		pc.blocked = map[string]bool{}
	}
	pc.blocked[path] = true
	stat := pc.stat
	pc.mu.Unlock()
	if stat == nil {
		stat = os.Stat
	}

	done := make(chan error, 1)
	go func() {
		fi, err := stat(path)
		pc.mu.Lock()
		delete(pc.blocked, path)
		pc.mu.Unlock()
		switch {
		case err != nil:
			done <- err
		case !fi.IsDir():
			done <- fmt.Errorf("%s is not a directory", path)
		default:
			done <- nil
		}
	}()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("stat %s did not answer within %s (hung mount?)", path, deadline)
	}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ParseConfig parses and validates config text; source names it in errors.
// It does not touch the file system.
func ParseConfig(data []byte, source string) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &ConfigError{File: source, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	p := &parser{file: source}
	cfg := &Config{
		Source:   source,
		Defaults: Defaults{Interval: DefaultInterval, Timeout: DefaultTimeout, Splay: true},
	}
	if len(doc.Content) == 0 {
		return nil, &ConfigError{File: source, Msg: "config is empty"}
	}
	root := doc.Content[0]
	var targetsNode *yaml.Node
	p.mapping(root, "", func(key string, k, v *yaml.Node) {
		switch key {
		case "defaults":
			p.mapping(v, "defaults", func(key string, k, v *yaml.Node) {
				field := "defaults." + key
				switch key {
				case "interval":
					cfg.Defaults.Interval = p.duration(v, field)
				case "timeout":
					cfg.Defaults.Timeout = p.duration(v, field)
				case "splay":
					cfg.Defaults.Splay = p.boolean(v, field)
				default:
					p.unknown(k, field)
				}
			})
		case "targets":
			targetsNode = v
		case "baselines_file":
			cfg.BaselinesFile = p.str(v, key)
		default:
			p.unknown(k, key)
		}
	})
	if cfg.Defaults.Interval < minInterval {
		p.errorf(root, "defaults.interval", "must be at least %s", minInterval)
	}
	if cfg.Defaults.Timeout <= 0 {
		p.errorf(root, "defaults.timeout", "must be positive")
	}
	if targetsNode == nil {
		p.errorf(root, "targets", "at least one target is required")
	} else {
		cfg.Targets = p.targets(targetsNode, cfg.Defaults)
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return cfg, nil
}

type parser struct {
	file string
	errs []error
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &ConfigError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) unknown(k *yaml.Node, field string) {
	p.errorf(k, field, "unknown key")
}

// mapping calls fn for each key of a mapping node, rejecting duplicates.
func (p *parser) mapping(n *yaml.Node, field string, fn func(key string, k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, "must be a mapping, got %s", nodeKind(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			p.errorf(k, join(field, k.Value), "duplicate key")
			continue
		}
		seen[k.Value] = true
		fn(k.Value, k, v)
	}
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func (p *parser) scalar(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, field, "must be a single value, got %s", nodeKind(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) str(n *yaml.Node, field string) string {
	s, _ := p.scalar(n, field)
	return s
}

func (p *parser) duration(n *yaml.Node, field string) time.Duration {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.errorf(n, field, "invalid duration %q (Go syntax, e.g. 30s, 15m, 1h)", s)
		return 0
	}
	return d
}

func (p *parser) size(n *yaml.Node, field string) int64 {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0
	}
	v, err := ParseSize(s)
	if err != nil {
		p.errorf(n, field, "%v", err)
	}
	return v
}

func (p *parser) integer(n *yaml.Node, field string) int {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		p.errorf(n, field, "invalid integer %q", s)
	}
	return v
}

func (p *parser) ratio(n *yaml.Node, field string) float64 {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v > 1 {
		p.errorf(n, field, "must be a number between 0 and 1, got %q", s)
		return 0
	}
	return v
}

func (p *parser) boolean(n *yaml.Node, field string) bool {
	s, ok := p.scalar(n, field)
	if !ok {
		return false
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	p.errorf(n, field, "must be true or false, got %q", s)
	return false
}

func (p *parser) targets(n *yaml.Node, defs Defaults) []*Target {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "targets", "must be a list, got %s", nodeKind(n))
		return nil
	}
	if len(n.Content) == 0 {
		p.errorf(n, "targets", "at least one target is required")
	}
	var out []*Target
	names := map[string]int{}
	for i, tn := range n.Content {
		field := fmt.Sprintf("targets[%d]", i)
		t := &Target{Line: tn.Line, WarningRatio: DefaultWarningRatio, CriticalRatio: DefaultCriticalRatio}
		var probesNode *yaml.Node
		nodes := map[string]*yaml.Node{}
		p.mapping(tn, field, func(key string, k, v *yaml.Node) {
			f := field + "." + key
			nodes[key] = v
			switch key {
			case "name":
				t.Name = p.str(v, f)
			case "path":
				t.Path = p.str(v, f)
			case "min_free_ratio":
				t.MinFreeRatio = p.ratio(v, f)
			case "max_bytes_per_hour":
				t.MaxBytesPerHour = p.size(v, f)
			case "warning_ratio":
				t.WarningRatio = p.ratio(v, f)
			case "critical_ratio":
				t.CriticalRatio = p.ratio(v, f)
			case "probes":
				probesNode = v
			default:
				p.unknown(k, f)
			}
		})
		if tn.Kind != yaml.MappingNode {
			continue
		}
		switch {
		case t.Name == "":
			p.errorf(tn, field+".name", "is required")
		case !nameRE.MatchString(t.Name):
			p.errorf(nodes["name"], field+".name", "%q: use letters, digits, '_', '.', '-' (at most 63)", t.Name)
		default:
			if prev, dup := names[t.Name]; dup {
				p.errorf(nodes["name"], field+".name", "duplicate target name %q (first defined at line %d)", t.Name, prev)
			}
			names[t.Name] = tn.Line
		}
		if t.Path == "" {
			p.errorf(tn, field+".path", "is required")
		} else if !filepath.IsAbs(t.Path) {
			p.errorf(nodes["path"], field+".path", "must be an absolute path, got %q", t.Path)
		}
		if t.CriticalRatio > t.WarningRatio {
			p.errorf(tn, field+".critical_ratio", "must not exceed warning_ratio (%g > %g)", t.CriticalRatio, t.WarningRatio)
		}
		if probesNode == nil {
			p.errorf(tn, field+".probes", "at least one probe is required")
		} else {
			t.Probes = p.probes(probesNode, field+".probes", defs)
		}
		out = append(out, t)
	}
	return out
}

func (p *parser) probes(n *yaml.Node, field string, defs Defaults) []*ProbeConfig {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, field, "must be a list, got %s", nodeKind(n))
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
			p.errorf(pn, f+".name", "duplicate probe name %q in this target (first defined at line %d)", pc.Name, prev)
		}
		names[pc.Name] = pn.Line
		out = append(out, pc)
	}
	return out
}

func (p *parser) probe(n *yaml.Node, field string, defs Defaults) *ProbeConfig {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, field, "must be a mapping, got %s", nodeKind(n))
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
				p.errorf(n.Content[i+1], field+".kind", "unknown probe kind %q (known: %s)", kind, strings.Join(KindNames(), ", "))
				return nil
			}
			pc.Kind = kind
		}
	}
	if !haveKind {
		p.errorf(n, field+".kind", "is required (one of: %s)", strings.Join(KindNames(), ", "))
		return nil
	}
	spec.setDefaults(pc)
	allowed := map[string]bool{}
	for _, k := range spec.keys {
		allowed[k] = true
	}
	nodes := map[string]*yaml.Node{}
	p.mapping(n, field, func(key string, k, v *yaml.Node) {
		f := field + "." + key
		nodes[key] = v
		switch key {
		case "name":
			pc.Name = p.str(v, f)
			return
		case "kind":
			return
		case "interval":
			pc.Interval = p.duration(v, f)
			return
		case "timeout":
			pc.Timeout = p.duration(v, f)
			return
		case "splay":
			pc.Splay = p.boolean(v, f)
			return
		}
		if !allowed[key] {
			if _, known := keyParsers[key]; known {
				p.errorf(k, f, "does not apply to kind %q (its keys: %s)", pc.Kind, strings.Join(spec.keys, ", "))
			} else {
				p.unknown(k, f)
			}
			return
		}
		keyParsers[key](p, pc, v, f)
	})
	switch {
	case pc.Name == "":
		p.errorf(n, field+".name", "is required")
	case !nameRE.MatchString(pc.Name):
		p.errorf(nodes["name"], field+".name", "%q: use letters, digits, '_', '.', '-' (at most 63)", pc.Name)
	}
	if pc.Interval < minInterval {
		p.errorf(nodeOr(nodes["interval"], n), field+".interval", "must be at least %s", minInterval)
	}
	if pc.Timeout <= 0 || pc.Timeout >= pc.Interval {
		p.errorf(nodeOr(nodes["timeout"], n), field+".timeout", "must be positive and shorter than the interval (%s >= %s)", pc.Timeout, pc.Interval)
	}
	for _, fe := range spec.validate(pc) {
		p.errorf(nodeOr(nodes[fe.key], n), field+"."+fe.key, "%s", fe.msg)
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
	"workers":      func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.Workers = p.integer(v, f) },
	"file_size":    func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.FileSize = p.size(v, f) },
	"block_size":   func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.BlockSize = p.size(v, f) },
	"segment_size": func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.SegmentSize = p.size(v, f) },
	"queue_depth":  func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.QueueDepth = p.integer(v, f) },
	"duration":     func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.Duration = p.duration(v, f) },
	"files":        func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.Files = p.integer(v, f) },
	"read_after":   func(p *parser, pc *ProbeConfig, v *yaml.Node, f string) { pc.ReadAfter = p.duration(v, f) },
}

// fieldError is a validation problem with one key of a probe.
type fieldError struct {
	key string
	msg string
}

// Target returns the target with the given name, or nil.
func (c *Config) Target(name string) *Target {
	for _, t := range c.Targets {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// TargetNames lists the configured targets, sorted.
func (c *Config) TargetNames() []string {
	names := make([]string, 0, len(c.Targets))
	for _, t := range c.Targets {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}
