package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// plateau_exporter finds plateau_backtest beside itself (a build tree), then
// in ../libexec/plateau_exporter/ (the RPM), then on $PATH, following a
// symlink to itself first; a file that is not executable is not it.
func TestFindBacktestBinaryLooksBesideThenLibexecThenPath(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "usr", "bin", "plateau_exporter")
	libexec := filepath.Join(root, "usr", "libexec", "plateau_exporter", backtestBinary)
	beside := filepath.Join(root, "usr", "bin", backtestBinary)
	pathDir := filepath.Join(root, "path")
	onPath := filepath.Join(pathDir, backtestBinary)
	write := func(path string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(self, 0o755)
	if err := os.MkdirAll(pathDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", pathDir)
	link := filepath.Join(root, "link-to-plateau_exporter")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}

	_, err := findBacktestBinary(link)
	if err == nil || !strings.Contains(err.Error(), beside) || !strings.Contains(err.Error(), filepath.Join(root, "usr", "bin", "..", "libexec", "plateau_exporter", backtestBinary)) {
		t.Errorf("with no plateau_backtest anywhere: %v; want an error naming where it looked", err)
	}
	write(onPath, 0o755)
	expect := func(want string) {
		t.Helper()
		got, err := findBacktestBinary(link)
		if err != nil || filepath.Clean(got) != want {
			t.Errorf("found %q (%v), want %s", got, err, want)
		}
	}
	expect(onPath)
	write(libexec, 0o755)
	expect(libexec)
	write(beside, 0o644)
	expect(libexec)
	if err := os.Chmod(beside, 0o755); err != nil {
		t.Fatal(err)
	}
	expect(beside)
}

// `plateau_exporter backtest` runs the backtest through plateau_backtest
// beside it: the arguments reach it, its JSON is the command's output and
// its errors the command's exit status 1; without plateau_backtest the
// command says where it looked and fails.
func TestBacktestCommandHandsOverToPlateauBacktest(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "plateau_exporter")
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(self, data, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	csvPath := filepath.Join(dir, "runs.csv")
	var b strings.Builder
	b.WriteString("system,file_system,app,op,start_unix,mib_per_second\n")
	for i := range 80 {
		fmt.Fprintf(&b, "lab,scratch,ior,read,%d,%.3f\n", 1_500_000_000+i*86400, 1000*math.Exp(0.05*math.Sin(float64(i))))
	}
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(self, append([]string{"backtest", "--input", csvPath, "--trials", "2"}, args...)...)
		cmd.Dir = root // the default rule files are relative to the repository
		cmd.Env = append(os.Environ(), "PATH="+dir)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}

	if _, stderr, code := run(); code != 1 || !strings.Contains(stderr, filepath.Join(dir, backtestBinary)) {
		t.Errorf("without plateau_backtest: exit %d, stderr %q; want 1 and where it looked", code, stderr)
	}

	build := exec.Command("go", "build", "-o", filepath.Join(dir, backtestBinary), "../plateau_backtest")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build plateau_backtest: %v\n%s", err, out)
	}
	stdout, stderr, code := run("--inject-drops", "0.5", "--output", "json")
	var doc struct {
		Series []struct {
			Key  string
			Runs int
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || len(doc.Series) != 1 || doc.Series[0].Key != "lab/scratch/ior/read" || doc.Series[0].Runs != 80 {
		t.Fatalf("backtest exited %d with %+v\nstdout %.300s\nstderr %s", code, doc, stdout, stderr)
	}
	if _, stderr, code := run("--inject-drops", "0.5,x"); code != 1 || !strings.Contains(stderr, "--inject-drops") {
		t.Errorf("a bad drop: exit %d, stderr %q; want 1 and the flag named", code, stderr)
	}
}
