package main

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/chart"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// characterizeConfig writes a config whose targets are fresh directories
// and returns the config file and the directory holding everything. Each
// target is "name: probes-yaml-lines", extra goes at the top level.
func characterizeConfig(t *testing.T, extra string, targets ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	var sb strings.Builder
	sb.WriteString("defaults:\n  interval: 1m\n  timeout: 30s\ntargets:\n")
	for _, tg := range targets {
		name, rest, _ := strings.Cut(tg, ":")
		path := filepath.Join(dir, name)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sb, "  - name: %s\n    path: %s\n%s", name, path, rest)
	}
	sb.WriteString(extra)
	file := filepath.Join(dir, "plateau.yml")
	if err := os.WriteFile(file, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, dir
}

const smallProbes = `    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB}
      - {name: md, kind: metadata, workers: 2, files: 64}
`

// runBinary runs the built plateau_exporter and returns its stdout,
// stderr and exit status.
func runBinary(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

func TestCharacterizeWritesBaselinesKeepsOthersAndBacksUp(t *testing.T) {
	cfg, dir := characterizeConfig(t, "baselines_file: BASE\n", "e2e:"+smallProbes)
	baseFile := filepath.Join(dir, "baselines.yml")
	data, _ := os.ReadFile(cfg)
	if err := os.WriteFile(cfg, bytes.ReplaceAll(data, []byte("BASE"), []byte(baseFile)), 0o600); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := runBinary(t, "--config.file", cfg, "--probe.hostname", "node1", "characterize", "--runs", "2", "--run-spacing", "0s", "--max-spread=100")
	if code != 0 {
		t.Fatalf("characterize exited %d:\n%s\n%s", code, out, stderr)
	}
	b, err := plateau.LoadBaselines(baseFile)
	if err != nil {
		t.Fatalf("written baselines do not parse: %v", err)
	}
	want := map[string][]string{"seq": {"write", "read"}, "md": {"create", "stat", "read", "remove"}}
	for p, ops := range want {
		for _, op := range ops {
			e := b.Entries[plateau.BaselineKey{Target: "e2e", Probe: p, Op: op}]
			if e == nil || !(e.Value > 0) || e.Runs != 2 || e.Host != "node1" || e.Method != "characterize --runs 2" || e.Params == "" {
				t.Errorf("%s %s: entry %+v", p, op, e)
			}
		}
	}
	if len(b.Entries) != 6 {
		t.Errorf("%d entries, want 6", len(b.Entries))
	}
	if strings.Count(out, " new ") != 6 || strings.Contains(out, "previous file is kept") {
		t.Errorf("first characterization should list 6 new entries and no backup:\n%s", out)
	}
	// Without a terminal, progress goes to the log, one line per run.
	if n := strings.Count(stderr, `msg="characterize run finished"`); n != 4 {
		t.Errorf("%d progress log lines, want 4:\n%s", n, stderr)
	}

	// Someone adds a baseline of another target by hand and halves the
	// write plateau; characterize keeps the one and reports the other.
	b.Entries[plateau.BaselineKey{Target: "other", Probe: "seq", Op: "write"}] = &plateau.Baseline{Kind: probe.KindSequential, Unit: probe.UnitBytesPerSecond, Value: 123e6}
	seqWrite := b.Entries[plateau.BaselineKey{Target: "e2e", Probe: "seq", Op: "write"}]
	seqWrite.Value /= 2
	edited := b.Marshal()
	if err := os.WriteFile(baseFile, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	// The OLD column shows the value as the file holds it, to six
	// significant digits; the halved float can round to another tenth.
	onFile, err := plateau.ParseBaselines(edited, baseFile)
	if err != nil {
		t.Fatal(err)
	}
	oldWrite := onFile.Entries[plateau.BaselineKey{Target: "e2e", Probe: "seq", Op: "write"}].Value
	out, stderr, code = runBinary(t, "--config.file", cfg, "characterize", "--runs", "2", "--run-spacing", "0s", "--probe", "seq", "--max-spread=100")
	if code != 0 {
		t.Fatalf("second characterize exited %d:\n%s\n%s", code, out, stderr)
	}
	backups, _ := filepath.Glob(baseFile + ".*.bak")
	if len(backups) != 1 {
		t.Fatalf("backups %v, want one", backups)
	}
	if got, _ := os.ReadFile(backups[0]); !bytes.Equal(got, edited) {
		t.Errorf("backup is not the file as it was before:\n%s", got)
	}
	if !strings.Contains(out, "(the previous file is kept as "+backups[0]+")") {
		t.Errorf("output does not name the backup:\n%s", out)
	}
	b2, err := plateau.LoadBaselines(baseFile)
	if err != nil {
		t.Fatal(err)
	}
	if e := b2.Entries[plateau.BaselineKey{Target: "other", Probe: "seq", Op: "write"}]; e == nil || e.Value != 123e6 {
		t.Errorf("entry of another target lost: %+v", e)
	}
	if e := b2.Entries[plateau.BaselineKey{Target: "e2e", Probe: "md", Op: "stat"}]; e == nil || e.Value != b.Entries[plateau.BaselineKey{Target: "e2e", Probe: "md", Op: "stat"}].Value {
		t.Errorf("entry of a probe not characterized this time changed: %+v", e)
	}
	// The halved write plateau doubles back, give or take the noise of
	// two runs: the change is printed as a percentage.
	var line string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == "e2e" && f[1] == "seq" && f[2] == "write" {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, chart.FormatRate(oldWrite, probe.UnitBytesPerSecond)) || !strings.Contains(line, "%") || strings.Contains(line, " new ") {
		t.Errorf("no old -> new line with a change for seq write in:\n%s", out)
	}
}

func TestCharacterizeWritesWhatItCouldAndExits2(t *testing.T) {
	// A target that is always too full for its min_free_ratio: its probe
	// is skipped on every run, so it cannot be characterized.
	cfg, dir := characterizeConfig(t, "",
		"good:"+smallProbes,
		"full:    min_free_ratio: 0.9999\n    probes:\n      - {name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB}\n")
	baseFile := filepath.Join(dir, "out.yml")
	out, stderr, code := runBinary(t, "--config.file", cfg, "characterize", "--runs", "2", "--run-spacing", "0s", "--max-spread=100", "--baselines-file", baseFile)
	if code != 2 {
		t.Fatalf("exit status %d, want 2:\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(out, "not characterized: full/seq: run 1 of 2: skipped (min_free)") {
		t.Errorf("no reason for the failed probe in:\n%s", out)
	}
	if !strings.Contains(stderr, "1 of 3 probe(s) could not be characterized fully") {
		t.Errorf("stderr: %s", stderr)
	}
	b, err := plateau.LoadBaselines(baseFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Entries) != 6 || b.Entries[plateau.BaselineKey{Target: "full", Probe: "seq", Op: "write"}] != nil {
		t.Errorf("want the 6 entries of the good target only, got %d", len(b.Entries))
	}
}

func TestCharacterizeRefusesWithoutAUsableBaselinesFile(t *testing.T) {
	cfg, dir := characterizeConfig(t, "", "e2e:"+smallProbes)
	_, stderr, code := runBinary(t, "--config.file", cfg, "characterize", "--runs", "1", "--run-spacing", "0s")
	if code != 2 || !strings.Contains(stderr, "no baselines file to write: set baselines_file in "+cfg+" or pass --baselines-file") {
		t.Errorf("without a baselines file: exit %d, %s", code, stderr)
	}
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("targets:\n  e2e: [not, a, mapping]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runBinary(t, "--config.file", cfg, "characterize", "--runs", "1", "--run-spacing", "0s", "--baselines-file", bad)
	if code != 2 || !strings.Contains(stderr, bad+":2") || !strings.Contains(stderr, "nothing was run") || strings.Contains(out, "characterizing") {
		t.Errorf("with an invalid baselines file: exit %d\n%s\n%s", code, out, stderr)
	}
	if got, _ := os.ReadFile(bad); string(got) != "targets:\n  e2e: [not, a, mapping]\n" {
		t.Errorf("invalid baselines file was changed: %s", got)
	}
	_, stderr, code = runBinary(t, "--config.file", cfg, "characterize", "--runs", "0", "--run-spacing", "0s", "--baselines-file", filepath.Join(dir, "b.yml"))
	if code != 2 || !strings.Contains(stderr, "--runs must be at least 1") {
		t.Errorf("--runs 0: exit %d, %s", code, stderr)
	}
}

func TestCharacterizeSweepWritesChartAndData(t *testing.T) {
	cfg, dir := characterizeConfig(t, "", "e2e:"+smallProbes)
	outDir := filepath.Join(dir, "charts")
	out, stderr, code := runBinary(t, "--config.file", cfg, "characterize", "--runs", "1", "--run-spacing", "0s", "--sweep", "--max-workers", "2", "--sweep-runs", "2", "--max-spread=100",
		"--baselines-file", filepath.Join(dir, "b.yml"), "--output-dir", outDir, "--probe", "seq")
	if code != 0 {
		t.Fatalf("exit %d:\n%s\n%s", code, out, stderr)
	}
	outputHas(t, out,
		"sweep of e2e/seq (sequential workers=1 file_size=4MiB block_size=1MiB): workers 1, 2, median of 2 run(s) per step",
		"OP ", "MAX", "SUSTAINED", "KNEE", "\nwrite ", "\nread ", "suggestion: ",
		"chart: "+filepath.Join(outDir, "e2e_seq_sweep.svg"),
		"data:  "+filepath.Join(outDir, "e2e_seq_sweep.csv"),
	)
	svg, err := os.ReadFile(filepath.Join(outDir, "e2e_seq_sweep.svg"))
	if err != nil {
		t.Fatal(err)
	}
	polylines := 0
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 2 {
		t.Errorf("%d lines in the chart, want write and read", polylines)
	}
	f, err := os.Open(filepath.Join(outDir, "e2e_seq_sweep.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// header + 2 levels × 2 ops × (2 runs + median)
	if len(rows) != 1+2*2*3 {
		t.Errorf("%d CSV rows, want 13", len(rows))
	}
}
