package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
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

// requireMan finds man-db's man (Debian man-db). `go test` must pass
// with Go alone, so a missing one skips, loudly; in CI, which installs it
// (.ci/packages.txt), it fails.
func requireMan(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("man")
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("man is not on PATH (%v): install the Debian package man-db; the man page is NOT rendered in this run", err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, "WARNING: "+msg)
	t.Skip(msg)
	return ""
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
