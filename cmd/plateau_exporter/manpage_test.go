package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"path/filepath"

	"github.com/alecthomas/kingpin/v2"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// The .TH line is one line of quoted fields, whatever the version text.
func TestManPageTemplateTH(t *testing.T) {
	got := manPageTemplate(kingpin.ManPageTemplate, `1.2.3"x\y`, "20261201-16:29:09")
	if !strings.Contains(got, "\n"+`.TH PLATEAU_EXPORTER 1 "2026-12-01" "plateau_exporter 1.2.3""x\ey" "User Commands"`+"\n.ad l\n") {
		t.Fatalf("kingpin's .TH line was not replaced (did its template change?):\n%s", got)
	}
	if got := manPageTemplate(kingpin.ManPageTemplate, "", "unknown"); !strings.Contains(got, "\n"+`.TH PLATEAU_EXPORTER 1 "" "plateau_exporter" "User Commands"`+"\n") {
		t.Fatalf("no version, no build date:\n%s", got)
	}
}

// requireMan finds man-db's man (Debian man-db).
func requireMan(t *testing.T) string {
	t.Helper()
	return probetest.RequireTool(t, "man", "man-db", "the man page's rendering")
}

// `plateau_exporter --help-man | man -l -` renders a page: the header and
// footer carry the name and the one-line version, every visible command
// has its section, the version's other lines (build user, go version) are
// nowhere, and groff has no warning about it.
func TestManPageRenders(t *testing.T) {
	page, err := exec.Command(binary, "--help-man").Output()
	if err != nil {
		t.Fatalf("--help-man: %v", err)
	}
	lines := strings.Split(string(page), "\n")
	if lines[0] != `.TH PLATEAU_EXPORTER 1 "" "plateau_exporter e2e" "User Commands"` {
		t.Errorf("first line %q, want the .TH line with the one-line version", lines[0])
	}
	// A text line starting with . or ' would be read as a request.
	macro := regexp.MustCompile(`^\.(TH|SH|SS|TP|PP|ad l)( |$)`)
	for i, l := range lines {
		if (strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'")) && !macro.MatchString(l) {
			t.Errorf("line %d is an unexpected roff request: %q", i+1, l)
		}
	}
	if strings.Contains(string(page), "build user") || strings.Contains(string(page), "go version") {
		t.Errorf("the multi-line version text leaked into the page:\n%s", page)
	}

	man := requireMan(t)
	var out bytes.Buffer
	for _, width := range []string{"60", "80", "100", "132"} {
		cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", "-")
		cmd.Env = append(os.Environ(), "MANWIDTH="+width, "MANPAGER=cat", "PAGER=cat", "MAN_KEEP_FORMATTING=")
		cmd.Stdin = bytes.NewReader(page)
		var stderr bytes.Buffer
		out.Reset()
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Fatalf("MANWIDTH=%s man --warnings -l -: %v\n%s", width, err, stderr.String())
		}
	}
	// man strips overstrikes when its output is no terminal, but be safe.
	text := regexp.MustCompile(".\b").ReplaceAllString(out.String(), "")
	rendered := strings.Split(strings.TrimSpace(text), "\n")
	if !strings.HasPrefix(rendered[0], "PLATEAU_EXPORTER(1)") || !strings.Contains(rendered[0], "User Commands") {
		t.Errorf("header line %q", rendered[0])
	}
	if last := rendered[len(rendered)-1]; !strings.HasPrefix(last, "plateau_exporter e2e") || !strings.HasSuffix(last, "PLATEAU_EXPORTER(1)") {
		t.Errorf("footer line %q, want the version and the page name", last)
	}
	for _, want := range []string{"NAME", "plateau_exporter - probe HPC file systems", "SYNOPSIS", "OPTIONS", "COMMANDS",
		"--config.file", "probe [<flags>]", "--allow-missing-baselines", "characterize", "check-config", "--fleet-nodes", "--hosts=FILE", "--fleet-bin"} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	if strings.Contains(text, "probe-worker") {
		t.Error("the hidden probe-worker command is in the page")
	}
}

// helpFlags runs the binary with args and returns the long flags its help
// lists.
func helpFlags(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--(?:\[no-\])?([a-z][\w.-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("%s lists no flags:\n%s", strings.Join(args, " "), out)
	}
	return flags
}

// TestEachCommandsHelpShowsItsOwnFlags holds every command's help to the
// flags that command reads: the daemon's collector and web flags on serve,
// and none of them on the commands an operator or a script runs by hand.
func TestEachCommandsHelpShowsItsOwnFlags(t *testing.T) {
	serve := helpFlags(t, "serve", "--help")
	for _, f := range []string{"collector.gpfs", "collector.nvme.dev-dir", "web.listen-address", "web.telemetry-path", "config.file", "log.level", "probe.history-file"} {
		if !serve[f] {
			t.Errorf("serve --help does not list --%s", f)
		}
	}
	top := helpFlags(t, "--help")
	if !top["collector.gpfs"] || !top["config.file"] || !top["web.listen-address"] || !top["web.config.file"] || !top["probe.history-file"] {
		t.Errorf("--help does not list the daemon's flags: %v", top)
	}
	for _, tc := range []struct {
		args     []string
		own, not []string
	}{
		{[]string{"backtest", "--help"}, []string{"input", "rules", "trials", "svg"}, []string{"config.file", "log.level", "probe.hostname"}},
		{[]string{"help", "backtest"}, []string{"input", "rules"}, []string{"config.file"}},
		{[]string{"probe", "--help"}, []string{"target", "probe", "output", "allow-missing-baselines", "config.file", "log.level", "probe.hostname"}, []string{"sweep", "input"}},
		{[]string{"characterize", "--help"}, []string{"runs", "sweep", "size-sweep", "slurm", "config.file", "log.level"}, []string{"allow-missing-baselines", "input"}},
		{[]string{"check-config", "--help"}, []string{"fleet-nodes", "hosts", "config.file", "probe.hostname"}, []string{"runs", "input", "log.level"}},
	} {
		got := helpFlags(t, tc.args...)
		for _, f := range tc.own {
			if !got[f] {
				t.Errorf("%s does not list --%s", strings.Join(tc.args, " "), f)
			}
		}
		for f := range got {
			if strings.HasPrefix(f, "collector.") || strings.HasPrefix(f, "web.") || strings.HasPrefix(f, "path.") {
				t.Errorf("%s lists the daemon's --%s", strings.Join(tc.args, " "), f)
			}
		}
		for _, f := range tc.not {
			if got[f] {
				t.Errorf("%s lists --%s, which it does not read", strings.Join(tc.args, " "), f)
			}
		}
	}
}

// TestSharedFlagsBeforeTheCommand keeps the order scripts may use: the
// shared flags before the command's name still reach the command.
func TestSharedFlagsBeforeTheCommand(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.yml")
	for _, args := range [][]string{
		{"--config.file", missing, "check-config"},
		{"--config.file=" + missing, "probe"},
		{"check-config", "--config.file", missing},
	} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), missing) {
			t.Errorf("%v: exit %d, want 2 naming %s:\n%s", args, code, missing, out)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatalf("%s was created", missing)
	}
}
