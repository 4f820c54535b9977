package packaging

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// git runs git in dir with an identity and no user or system config, so the
// test behaves the same on any machine.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func commit(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "f")
	git(t, dir, "commit", "-q", "-m", content)
}

func versionOf(t *testing.T, dir string) string {
	t.Helper()
	script, err := filepath.Abs("version.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("version.sh in %s: %v\n%s", dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestVersionScript walks one real repository through the cases that
// version.sh maps from `git describe` to an RPM version and release.
func TestVersionScript(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed to test version.sh (apt-get install git)")
	}
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	for _, c := range []string{"one", "two", "three"} {
		commit(t, dir, c)
	}
	short := func() string { return git(t, dir, "rev-parse", "--short", "HEAD") }

	steps := []struct {
		name  string
		setup func()
		want  func() string
	}{
		{"no tag: 0.0.0 and a release counting commits", func() {},
			func() string { return "0.0.0 0.3.g" + short() }},
		{"release tag", func() { git(t, dir, "tag", "v1.2.3") },
			func() string { return "1.2.3 1" }},
		{"commits after the tag", func() { commit(t, dir, "four"); commit(t, dir, "five") },
			func() string { return "1.2.3 1.2.g" + short() }},
		{"uncommitted change", func() {
			if err := os.WriteFile(filepath.Join(dir, "f"), []byte("edited"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, func() string { return "1.2.3 1.2.g" + short() + ".dirty" }},
		{"pre-release tag sorts before its release", func() {
			git(t, dir, "checkout", "-q", "--", "f")
			git(t, dir, "tag", "v1.3.0-rc.1")
		}, func() string { return "1.3.0~rc.1 1" }},
		{"commit after a pre-release tag", func() { commit(t, dir, "six") },
			func() string { return "1.3.0~rc.1 1.1.g" + short() }},
		{"tag without v and with a character RPM rejects", func() { git(t, dir, "tag", "2.0@beta") },
			func() string { return "2.0_beta 1" }},
	}
	for _, s := range steps {
		s.setup()
		if got, want := versionOf(t, dir), s.want(); got != want {
			t.Errorf("%s: version.sh printed %q, want %q", s.name, got, want)
		}
	}
}

func TestVersionScriptOutsideGit(t *testing.T) {
	script, err := filepath.Abs("version.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(cmd.Dir))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("version.sh outside a git work tree succeeded with %q; it must fail rather than invent a version", out)
	}
	if !strings.Contains(string(out), "not a git work tree") {
		t.Errorf("version.sh outside git said %q, want it to name the reason", out)
	}
}

// TestSpecGoMinimum keeps the spec's BuildRequires on golang in step with
// go.mod: a Go older than the go directive refuses to build the module, so
// the RPM must not accept one.
func TestSpecGoMinimum(t *testing.T) {
	goMod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(goMod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	spec, err := os.ReadFile("rpm/plateau_exporter.spec")
	if err != nil {
		t.Fatal(err)
	}
	s := regexp.MustCompile(`(?m)^%global go_min (\S+)$`).FindSubmatch(spec)
	if s == nil {
		t.Fatal("spec has no go_min global")
	}
	if string(s[1]) != string(m[1]) {
		t.Errorf("spec requires golang >= %s but go.mod says go %s", s[1], m[1])
	}
	if !bytes.Contains(spec, []byte("BuildRequires:  golang >= %{go_min}")) {
		t.Error("spec does not use go_min in its golang BuildRequires")
	}
}

// TestSpecSourcesExist checks that every packaging/ file the spec installs is
// in the tree, so a renamed file breaks here and not in a site's Koji.
func TestSpecSourcesExist(t *testing.T) {
	spec, err := os.ReadFile("rpm/plateau_exporter.spec")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`packaging/[A-Za-z0-9_.-]+`).FindAllString(string(spec), -1)
	if len(refs) < 8 {
		t.Fatalf("spec names only %d packaging/ files: %v", len(refs), refs)
	}
	for _, r := range refs {
		if _, err := os.Stat(filepath.Join("..", r)); err != nil {
			t.Errorf("spec installs %s: %v", r, err)
		}
	}
}

// uncommentExamples turns the commented example targets of plateau.yml into
// active ones: a block starts at a line "  # - name:" and goes on while the
// lines are "  #   ..." (deeper than the list item).
func uncommentExamples(t *testing.T, text string) (string, int) {
	t.Helper()
	var out strings.Builder
	blocks := 0
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "  # - name:"):
			in = true
			blocks++
			line = "  " + strings.TrimPrefix(line, "  # ")
		case in && strings.HasPrefix(line, "  #   "):
			line = "  " + strings.TrimPrefix(line, "  # ")
		default:
			in = false
		}
		out.WriteString(line + "\n")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String(), blocks
}

// TestDefaultConfig parses the packaged plateau.yml, and then the same file
// with its GPFS and NFS examples switched on, with the daemon's own config
// parser: both must be valid, and the examples must say what CONFIGURATION.md,
// docs/ and the characterizations say.
func TestDefaultConfig(t *testing.T) {
	data, err := os.ReadFile("plateau.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := probe.ParseConfig(data, "packaging/plateau.yml")
	if err != nil {
		t.Fatalf("the packaged config does not parse: %v", err)
	}
	if len(cfg.Targets) != 1 || cfg.Targets[0].Path != "/var/lib/plateau_exporter" {
		t.Errorf("want exactly the one active target in the state directory, got %d targets", len(cfg.Targets))
	}
	if cfg.BaselinesFile != "/var/lib/plateau_exporter/baselines.yml" {
		t.Errorf("baselines_file is %q, want it in the unit's StateDirectory", cfg.BaselinesFile)
	}

	text, blocks := uncommentExamples(t, string(data))
	if blocks != 2 {
		t.Fatalf("found %d commented example targets, want 2 (GPFS and NFS)", blocks)
	}
	cfg, err = probe.ParseConfig([]byte(text), "packaging/plateau.yml with examples")
	if err != nil {
		t.Fatalf("the commented examples do not parse once uncommented: %v", err)
	}
	byName := map[string]*probe.Target{}
	for _, tg := range cfg.Targets {
		byName[tg.Name] = tg
	}
	const kib, mib = 1 << 10, 1 << 20
	gpfs := byName["scratch"]
	if gpfs == nil {
		t.Fatal("no GPFS example target named scratch")
	}
	kinds := map[string]bool{}
	for _, p := range gpfs.Probes {
		kinds[p.Kind] = true
		if (p.Kind == "sequential" || p.Kind == "shared_file") && p.BlockSize != 8*mib {
			t.Errorf("GPFS example probe %s transfers %d bytes, want the file system's 8 MiB block", p.Name, p.BlockSize)
		}
		if p.Kind == "random" && (p.BlockSize != 4*kib || p.QueueDepth != 16) {
			t.Errorf("GPFS example random probe: block %d depth %d, want 4 KiB at queue depth 16", p.BlockSize, p.QueueDepth)
		}
	}
	for _, k := range []string{"sequential", "shared_file", "random", "metadata"} {
		if !kinds[k] {
			t.Errorf("GPFS example has no %s probe", k)
		}
	}
	nfs := byName["projects"]
	if nfs == nil {
		t.Fatal("no NFS example target named projects")
	}
	sizes := map[int64]bool{}
	for _, p := range nfs.Probes {
		if p.Kind == "sequential" {
			sizes[p.BlockSize] = true
		}
	}
	if !sizes[512*kib] || !sizes[128*kib] {
		t.Errorf("NFS example sequential block sizes %v, want 512 KiB (writes) and 128 KiB (reads)", sizes)
	}
}

// TestUnitCapabilities pins the unit's privileges: the daemon runs as
// plateau and receives CAP_SYS_ADMIN, and nothing else, only to hand it to
// the SMART helper before it drops every capability (internal/privsep); no new
// privileges can be gained.
func TestUnitCapabilities(t *testing.T) {
	data, err := os.ReadFile("plateau_exporter.service")
	if err != nil {
		t.Fatal(err)
	}
	service := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && section == "[Service]" {
			service[k] = append(service[k], v)
		}
	}
	for k, want := range map[string]string{
		"User":                  "plateau",
		"CapabilityBoundingSet": "CAP_SYS_ADMIN",
		"AmbientCapabilities":   "CAP_SYS_ADMIN",
		"NoNewPrivileges":       "yes",
	} {
		if got := service[k]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s = %q, want exactly %q", k, got, want)
		}
	}
	for _, k := range []string{"SecureBits", "Capabilities", "PermissionsStartOnly"} {
		if v, ok := service[k]; ok {
			t.Errorf("[Service] sets %s=%q", k, v)
		}
	}
}

// gpfsWholeCommands is the GPFS command lines the collector runs as they
// stand, without a file system's device in them: the sudoers snippet grants
// each exactly (TestSudoersCommandLines reads the file, the root-only TestRPM
// asks sudo itself).
func gpfsWholeCommands() []string {
	return []string{
		"/usr/lpp/mmfs/bin/mmpmon -p -s -i /usr/share/plateau_exporter/mmpmon-client.requests",
		"/usr/lpp/mmfs/bin/mmpmon -p -s -i /usr/share/plateau_exporter/mmpmon-nsd.requests",
		"/usr/lpp/mmfs/bin/mmgetstate -Y",
		"/usr/lpp/mmfs/bin/mmhealth node show -Y",
		"/usr/lpp/mmfs/bin/mmdiag --waiters -Y",
		"/usr/lpp/mmfs/bin/mmdiag --iohist",
		"/usr/lpp/mmfs/bin/mmfsadm test verbs status",
		"/usr/lpp/mmfs/bin/mmlsfs all -T -Y",
	}
}

// The sudoers snippet grants the GPFS command lines the collector runs, the
// lustre collector's two lctl lines and the lnet collector's two lnetctl
// lines, and no other; the root-only TestRPM checks the same through sudo itself. This
// catches an edit without root: every granted line and the refusal of the
// per-file-system commands' other device parts.
func TestSudoersCommandLines(t *testing.T) {
	data, err := os.ReadFile("plateau_exporter.sudoers")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(string(data), "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	aliases := map[string][]string{}
	var specs []string
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, "Cmnd_Alias "); ok {
			name, cmds, _ := strings.Cut(rest, " = ")
			for _, c := range strings.Split(cmds, ", ") {
				aliases[name] = append(aliases[name], strings.TrimSpace(c))
			}
		} else if strings.HasPrefix(l, "plateau ") {
			specs = append(specs, l)
		}
	}
	want := map[string][]string{
		"PLATEAU_GPFS": append(gpfsWholeCommands(),
			"/usr/lpp/mmfs/bin/mmlsdisk [A-Za-z0-9_]* -Y",
			"/usr/lpp/mmfs/bin/mmlsqos [A-Za-z0-9_]* -Y"),
		"PLATEAU_GPFS_BAD_DEVICE": {
			"/usr/lpp/mmfs/bin/mmlsdisk *[!A-Za-z0-9_.-]* -Y",
			"/usr/lpp/mmfs/bin/mmlsqos *[!A-Za-z0-9_.-]* -Y",
		},
		// The '*' escaped: a literal '*', lctl's pattern, not a sudoers
		// glob that would match any further argument.
		"PLATEAU_LUSTRE": {
			`/usr/sbin/lctl get_param osc.\*.rpc_stats llite.\*.stats`,
			`/usr/sbin/lctl get_param osc.\*.import osc.\*.state mdc.\*.import mdc.\*.state`,
			"/usr/sbin/lnetctl net show -v 2",
			"/usr/sbin/lnetctl peer show -v 2",
		},
	}
	if len(aliases) != len(want) {
		t.Errorf("command aliases %v, want exactly %v", aliases, want)
	}
	for name, cmds := range want {
		if strings.Join(aliases[name], "|") != strings.Join(cmds, "|") {
			t.Errorf("%s = %q, want %q", name, aliases[name], cmds)
		}
	}
	// mmdiag only with exactly the arguments the collector passes: no
	// glob nor a bare command, which sudoers would take as any argument
	// (--iohist -Y, --all, ...).
	for _, c := range aliases["PLATEAU_GPFS"] {
		if strings.HasPrefix(c, "/usr/lpp/mmfs/bin/mmdiag") && c != "/usr/lpp/mmfs/bin/mmdiag --waiters -Y" && c != "/usr/lpp/mmfs/bin/mmdiag --iohist" {
			t.Errorf("sudoers allows %q: mmdiag runs only as '--waiters -Y' and '--iohist'", c)
		}
	}
	if len(specs) != 1 || specs[0] != "plateau ALL = (root) NOPASSWD: PLATEAU_GPFS, PLATEAU_LUSTRE, !PLATEAU_GPFS_BAD_DEVICE" {
		t.Errorf("user specifications %q, want only the grant followed by the refusal", specs)
	}
	if path, err := exec.LookPath("visudo"); err == nil {
		if out, err := exec.Command(path, "-c", "-f", "plateau_exporter.sudoers").CombinedOutput(); err != nil {
			t.Errorf("visudo -c: %v\n%s", err, out)
		}
	}
}
