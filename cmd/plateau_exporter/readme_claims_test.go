package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README and the guides under docs/ are tested against the binary: every
// plateau_exporter command line of their code blocks that can run without
// root or a cluster is run (--help, check-config, probe on a temp
// directory), and the others' flags are looked up in their command's
// --help; every error example of a code block is reproduced and must name
// the same file, line and field and quote the same value; a table header
// shown must be the one probe prints; and a sentence saying what
// `plateau_exporter --help` lists is held to it.

// docBlock is one fenced code block of a document.
type docBlock struct {
	file string
	line int // of its first line of content
	lang string
	text []string
}

// docSpan is one inline code span, with the sentence around it.
type docSpan struct {
	file, code, context string
	line                int
}

// claimDocs are the documents whose claims are tested: README.md and every
// guide under docs/.
func claimDocs(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join("..", "..", "README.md")}
	more, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, more...)
}

func readDoc(t *testing.T, file string) ([]docBlock, []docSpan) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []docBlock
	var spans []docSpan
	var cur *docBlock
	span := regexp.MustCompile("`([^`]+)`")
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "```") {
			if cur == nil {
				cur = &docBlock{file: file, line: i + 2, lang: strings.TrimPrefix(trimmed, "```")}
			} else {
				blocks = append(blocks, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.text = append(cur.text, l)
			continue
		}
		// The sentence context: this line and the next two (a claim
		// wraps).
		ctx := strings.Join(lines[i:min(len(lines), i+3)], " ")
		for _, m := range span.FindAllStringSubmatch(l, -1) {
			spans = append(spans, docSpan{file: file, line: i + 1, code: m[1], context: ctx})
		}
	}
	return blocks, spans
}

// commandLines joins a shell block's continued lines and drops comments.
func commandLines(b docBlock) []string {
	var out []string
	cur := ""
	for _, l := range b.text {
		if i := strings.Index(l, " #"); i >= 0 && !strings.Contains(l[:i], "'") {
			l = l[:i]
		}
		l = strings.TrimRight(l, " \t")
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		cur += l
		if s := strings.TrimSpace(cur); s != "" {
			out = append(out, s)
		}
		cur = ""
	}
	return out
}

// shellWords splits a command line as sh would for the simple lines the
// documents show: words, with '…' and "…" quoting.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	quote := rune(0)
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

var binaryNames = regexp.MustCompile(`^(?:\S*/)?plateau_exporter$`)

// plateauArgs finds the plateau_exporter invocation in a command line
// (after runuser -- or a $(…)) and returns its arguments.
func plateauArgs(line string) ([]string, bool) {
	words := shellWords(strings.NewReplacer("$(", "", ")", "", "|", " | ", "2>&1", " ", ">", " > ").Replace(line))
	for i, w := range words {
		start := -1
		switch {
		case binaryNames.MatchString(w):
			start = i + 1
		case w == "go" && i+2 < len(words) && words[i+1] == "run" && words[i+2] == "./cmd/plateau_exporter":
			start = i + 3
		}
		if start < 0 {
			continue
		}
		var args []string
		for _, a := range words[start:] {
			if a == "|" || a == ">" || a == "2>&1" || strings.HasPrefix(a, ">") || a == "&&" || a == ";" {
				break
			}
			// A script's own arguments ("$@") are its caller's.
			if a == "$@" || a == "$*" {
				continue
			}
			args = append(args, a)
		}
		return args, true
	}
	return nil, false
}

var publicCommands = map[string]bool{"serve": true, "check-config": true, "probe": true, "characterize": true, "backtest": true}

// splitCommand returns the command an argument list names ("" for the
// default) and its flags' names.
func splitCommand(args []string) (cmd string, flags []string) {
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--"):
			name := strings.TrimPrefix(a, "--")
			if i := strings.IndexByte(name, '='); i >= 0 {
				name = name[:i]
			}
			name = strings.TrimPrefix(name, "no-")
			flags = append(flags, name)
		case cmd == "" && publicCommands[a]:
			cmd = a
		}
	}
	return cmd, flags
}

// helpOf is the long flags a command's --help lists, cached.
func helpOf(t *testing.T, cache map[string]map[string]bool, cmd string) map[string]bool {
	t.Helper()
	if h, ok := cache[cmd]; ok {
		return h
	}
	args := []string{"--help"}
	if cmd != "" {
		args = []string{cmd, "--help"}
	}
	h := helpFlags(t, args...)
	cache[cmd] = h
	return h
}

// claimConfig writes a config whose targets and probes are the ones a
// command line names, each a tiny sequential probe in a temp directory.
func claimConfig(t *testing.T, args []string) string {
	t.Helper()
	targets, probes := []string{}, []string{}
	for i := 0; i+1 < len(args); i++ {
		switch {
		case args[i] == "--target":
			targets = append(targets, args[i+1])
		case args[i] == "--probe":
			probes = append(probes, args[i+1])
		}
	}
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--target="); ok {
			targets = append(targets, v)
		}
		if v, ok := strings.CutPrefix(a, "--probe="); ok {
			probes = append(probes, v)
		}
	}
	if len(targets) == 0 {
		targets = []string{"scratch"}
	}
	if len(probes) == 0 {
		probes = []string{"seq"}
	}
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("defaults:\n  interval: 1m\n  timeout: 20s\ntargets:\n")
	for _, tn := range targets {
		path := filepath.Join(dir, tn)
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  - name: %s\n    path: %s\n    probes:\n", tn, path)
		for _, pn := range probes {
			fmt.Fprintf(&b, "      - {name: %s, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB}\n", pn)
		}
	}
	cfg := filepath.Join(dir, "plateau.yml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runnable rewrites a documented command line to one the test can run
// without root or a cluster, or says why it cannot.
func runnable(t *testing.T, args []string) ([]string, string) {
	cmd, _ := splitCommand(args)
	for _, a := range args {
		if a == "--help" || a == "-h" || a == "--help-man" || a == "--version" {
			return args, ""
		}
	}
	switch cmd {
	case "check-config", "probe":
	default:
		return nil, "only --help, check-config and probe run without a cluster or a live daemon"
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--config.file" || a == "--probe.hostname":
			i++
			continue
		case strings.HasPrefix(a, "--config.file=") || strings.HasPrefix(a, "--probe.hostname="):
			continue
		case a == "--hosts" || strings.HasPrefix(a, "--hosts="):
			return nil, "needs the site's host list"
		}
		out = append(out, a)
	}
	return append(out, "--config.file="+claimConfig(t, args), "--probe.hostname=readme-node"), ""
}

func TestReadmeCommandLines(t *testing.T) {
	cache := map[string]map[string]bool{}
	ran := 0
	for _, file := range claimDocs(t) {
		blocks, _ := readDoc(t, file)
		for _, b := range blocks {
			if b.lang != "sh" && b.lang != "" && b.lang != "bash" && b.lang != "console" {
				continue
			}
			for _, line := range commandLines(b) {
				args, ok := plateauArgs(line)
				if !ok {
					continue
				}
				where := fmt.Sprintf("%s:%d: %s", filepath.Base(file), b.line, line)
				cmd, flags := splitCommand(args)
				// Every flag shown must be one the command's --help
				// lists.
				help := helpOf(t, cache, cmd)
				for _, f := range flags {
					if f == "help" || f == "help-man" || f == "help-long" || f == "version" {
						continue
					}
					if !help[f] {
						t.Errorf("%s: --%s is not a flag of %q (its --help does not list it)", where, f, cmd)
					}
				}
				run, why := runnable(t, args)
				if why != "" {
					t.Logf("%s: not run: %s", where, why)
					continue
				}
				ran++
				out, stderr, code := runBinary(t, run...)
				if strings.Contains(stderr, "error: ") && strings.Contains(stderr, "try --help") {
					t.Errorf("%s: the binary refuses the command line: %s", where, stderr)
					continue
				}
				if code != 0 {
					t.Errorf("%s: exit %d, want 0 on a fresh temp directory:\n%s%s", where, code, out, stderr)
				}
			}
		}
	}
	if ran == 0 {
		t.Fatal("no command line of the documents could be run: the extraction is broken")
	}
}

// configErrorLine is an error example: [plateau_exporter: ]file:line: field: message.
var configErrorLine = regexp.MustCompile(`^(?:plateau_exporter: )?(\S+\.ya?ml):(\d+): ((?:targets|defaults)\S*): (.+)$`)

func TestReadmeConfigErrors(t *testing.T) {
	checked := 0
	for _, file := range claimDocs(t) {
		blocks, _ := readDoc(t, file)
		for _, b := range blocks {
			for _, l := range b.text {
				m := configErrorLine.FindStringSubmatch(strings.TrimSpace(l))
				if m == nil {
					continue
				}
				where := fmt.Sprintf("%s:%d", filepath.Base(file), b.line)
				var line int
				fmt.Sscan(m[2], &line)
				field, msg := m[3], m[4]
				value := regexp.MustCompile(`"([^"]*)"`).FindStringSubmatch(msg)
				key := field[strings.LastIndexByte(field, '.')+1:]
				if !strings.HasPrefix(field, "targets[0].probes[0].") || value == nil || line < 7 {
					t.Logf("%s: error example %q not reproduced (only a probe key with a quoted value)", where, l)
					continue
				}
				// The key with the quoted value, on the line the example
				// names: comment lines pad the config up to it.
				dir := t.TempDir()
				head := "targets:\n  - name: scratch\n    path: " + dir + "\n    probes:\n      - name: seq\n        kind: sequential\n"
				pad := strings.Repeat("        # padding\n", line-7)
				body := head + pad + "        " + key + ": " + value[1] + "\n"
				if key != "block_size" {
					body += "        block_size: 1MiB\n"
				}
				if key != "file_size" {
					body += "        file_size: 4MiB\n"
				}
				cfg := filepath.Join(dir, m[1])
				if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				out, stderr, code := runBinary(t, "check-config", "--config.file="+cfg)
				want := fmt.Sprintf("%s:%d: %s: ", cfg, line, field)
				if code != 2 || !strings.Contains(out+stderr, want) || !strings.Contains(out+stderr, `"`+value[1]+`"`) {
					t.Errorf("%s: the example says %q; check-config on that value (exit %d) says:\n%s%s", where, l, code, out, stderr)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no error example found in the documents")
	}
}

// The probe table the documents show has the header probe prints, and a
// sentence saying which flags `plateau_exporter --help` lists is true.
func TestReadmeProbeTableAndHelpClaims(t *testing.T) {
	cfg := claimConfig(t, nil)
	out, stderr, code := runBinary(t, "probe", "--config.file="+cfg, "--probe.hostname=readme-node")
	if code != 0 {
		t.Fatalf("probe on a temp directory: exit %d\n%s%s", code, out, stderr)
	}
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	cache := map[string]map[string]bool{}
	list := regexp.MustCompile(`the daemon's ([a-z]+(?:, [a-z]+)*(?:,? and [a-z]+)?) flags`)
	tables, claims := 0, 0
	for _, file := range claimDocs(t) {
		blocks, spans := readDoc(t, file)
		for _, b := range blocks {
			if len(b.text) == 0 || !strings.HasPrefix(strings.TrimSpace(b.text[0]), "TARGET ") || !strings.Contains(b.text[0], "VERDICT") {
				continue
			}
			tables++
			if got := strings.Fields(b.text[0]); strings.Join(got, " ") != strings.Join(header, " ") {
				t.Errorf("%s:%d: table header %v, probe prints %v", filepath.Base(file), b.line, got, header)
			}
		}
		for _, s := range spans {
			if s.code != "plateau_exporter --help" {
				continue
			}
			m := list.FindStringSubmatch(strings.Join(strings.Fields(s.context), " "))
			if m == nil {
				continue
			}
			claims++
			help := helpOf(t, cache, "")
			for _, kind := range regexp.MustCompile(`[a-z]+`).FindAllString(m[1], -1) {
				if kind == "and" {
					continue
				}
				found := false
				for f := range help {
					found = found || strings.HasPrefix(f, kind+".")
				}
				if !found {
					t.Errorf("%s:%d: says `plateau_exporter --help` lists the daemon's %s flags; it lists no --%s.*", filepath.Base(s.file), s.line, kind, kind)
				}
			}
		}
	}
	t.Logf("%d probe tables, %d help claims checked", tables, claims)
}
