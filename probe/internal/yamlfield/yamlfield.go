// Package yamlfield decodes hand-written YAML documents node by node, so
// that every problem it reports names the file, the line and the field
// (targets[0].probes[2].block_size) instead of a Go type. The config and the
// baselines file are both read this way; neither lets an unknown or
// duplicate key pass.
package yamlfield

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a file, located by line and field.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", loc, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
}

// Parse reads data into a node tree; a syntax error names the file.
func Parse(data []byte, file string) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, SyntaxError(data, file, err)
	}
	return &doc, nil
}

// syntaxLine is yaml's "line N: message".
var syntaxLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// SyntaxError locates a YAML syntax error on the line where the document
// goes wrong. yaml names the line where the enclosing block began for some
// errors: a key indented one space short on line 4 of a target list is
// "line 1: did not find expected '-' indicator". The line reported is the
// first whose prefix of the document fails with the same message; yaml's
// own line when none does. Documents of more than maxScanLines lines keep
// yaml's line.
func SyntaxError(data []byte, file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{File: file, Msg: msg}
	if m := syntaxLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxScanLines {
		return e
	}
	for k := 1; k <= len(lines); k++ {
		var doc yaml.Node
		perr := yaml.Unmarshal(bytes.Join(lines[:k], nil), &doc)
		if perr == nil {
			continue
		}
		pm := strings.TrimPrefix(perr.Error(), "yaml: ")
		if m := syntaxLine.FindStringSubmatch(pm); m != nil {
			pm = m[2]
		}
		if pm == e.Msg {
			e.Line = k
			break
		}
	}
	return e
}

// maxScanLines bounds SyntaxError's search: a config or baselines file is
// hundreds of lines; the search parses each prefix once.
const maxScanLines = 5000

// Decoder collects the problems of one file. Its methods return the zero
// value after recording a problem, so a caller can decode every field and
// report all problems at once.
type Decoder struct {
	File string
	Errs []error
}

// Errorf records a problem at node n (nil: no line).
func (d *Decoder) Errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.Errs = append(d.Errs, &Error{File: d.File, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Unknown records a key that the schema does not have.
func (d *Decoder) Unknown(k *yaml.Node, field string) {
	d.Errorf(k, field, "unknown key")
}

// Mapping calls fn for each key of a mapping node, rejecting duplicates.
func (d *Decoder) Mapping(n *yaml.Node, field string, fn func(key string, k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n, field, "must be a mapping, got %s", Describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			d.Errorf(k, Join(field, k.Value), "duplicate key")
			continue
		}
		seen[k.Value] = true
		fn(k.Value, k, v)
	}
}

// Join appends key to a field path.
func Join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// Describe names what a node is, for messages.
func Describe(n *yaml.Node) string {
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

// Scalar is the text of a single value.
func (d *Decoder) Scalar(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.Errorf(n, field, "must be a single value, got %s", Describe(n))
		return "", false
	}
	return n.Value, true
}

// Str is a single value as text.
func (d *Decoder) Str(n *yaml.Node, field string) string {
	s, _ := d.Scalar(n, field)
	return s
}

// Duration is a Go duration (30s, 15m, 1h).
func (d *Decoder) Duration(n *yaml.Node, field string) time.Duration {
	s, ok := d.Scalar(n, field)
	if !ok {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Errorf(n, field, "invalid duration %q (Go syntax, e.g. 30s, 15m, 1h)", s)
		return 0
	}
	return v
}

// Integer is a decimal int.
func (d *Decoder) Integer(n *yaml.Node, field string) int {
	s, ok := d.Scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		d.Errorf(n, field, "invalid integer %q", s)
	}
	return v
}

// Ratio is a number between 0 and 1.
func (d *Decoder) Ratio(n *yaml.Node, field string) float64 {
	s, ok := d.Scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || v > 1 {
		d.Errorf(n, field, "must be a number between 0 and 1, got %q", s)
		return 0
	}
	return v
}

// NonNegative is a number of at least 0 (not NaN).
func (d *Decoder) NonNegative(n *yaml.Node, field string) float64 {
	s, ok := d.Scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsNaN(v) {
		d.Errorf(n, field, "must be a non-negative number, got %q", s)
		return 0
	}
	return v
}

// Boolean is true or false, spelled so.
func (d *Decoder) Boolean(n *yaml.Node, field string) bool {
	s, ok := d.Scalar(n, field)
	if !ok {
		return false
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	d.Errorf(n, field, "must be true or false, got %q", s)
	return false
}
