//go:build integration

package packaging

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The acceptance tests of the RPM packaging: the package builds
// from the tree, rebuilds from its SRPM with the network cut off, passes
// rpmlint, installs into a scratch root with the right owners and modes,
// systemd accepts the unit, and the sudoers snippet allows exactly the GPFS
// commands. They need root (user creation, /etc/sudoers.d, mknod, network
// namespaces) and the Debian packages listed in .ci/packages.txt.

const pkgName = "plateau_exporter"

// requireTools fails (not skips) the test when a prerequisite is missing:
// an integration run that silently skips would prove nothing.
func requireTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the packaging integration tests need root (make integration): they create users, sudoers drop-ins, device nodes and network namespaces")
	}
	tools := map[string]string{
		"make": "make", "git": "git", "go": "Go at /usr/local/go/bin", "rpm": "rpm",
		"rpmbuild": "rpm", "rpmlint": "rpmlint", "systemd-analyze": "systemd",
		"visudo": "sudo", "sudo": "sudo", "unshare": "util-linux", "ldd": "libc-bin",
		"useradd": "passwd", "userdel": "passwd", "groupdel": "passwd", "getent": "libc-bin",
		"rpm2cpio": "rpm", "cpio": "cpio",
	}
	var missing []string
	for tool, pkg := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", tool, pkg))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("packaging integration prerequisites missing: %s; .ci/packages.txt lists them", strings.Join(missing, ", "))
	}
}

type cmdResult struct {
	out  string
	code int
}

// runCmd runs a command and returns its combined output and exit status; it
// fails the test only when the command could not be started.
func runCmd(t *testing.T, dir string, env []string, name string, args ...string) cmdResult {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return cmdResult{string(out), 0}
	case errors.As(err, &exit):
		return cmdResult{string(out), exit.ExitCode()}
	default:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
		return cmdResult{}
	}
}

// mustRun is runCmd for commands that must succeed.
func mustRun(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	r := runCmd(t, dir, env, name, args...)
	if r.code != 0 {
		t.Fatalf("%s %s exited %d:\n%s", name, strings.Join(args, " "), r.code, r.out)
	}
	return r.out
}

// envWith returns the environment with the given variables replaced.
func envWith(kv ...string) []string {
	drop := map[string]bool{}
	for _, e := range kv {
		drop[strings.SplitN(e, "=", 2)[0]] = true
	}
	var env []string
	for _, e := range os.Environ() {
		if !drop[strings.SplitN(e, "=", 2)[0]] {
			env = append(env, e)
		}
	}
	return append(env, kv...)
}

func globOne(t *testing.T, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 {
		t.Fatalf("want exactly one %s, found %v", pattern, m)
	}
	return m[0]
}

func TestRPM(t *testing.T) {
	requireTools(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	// The same targets an admin runs; DIST outside the tree keeps the work
	// tree untouched.
	mustRun(t, repo, nil, "make", "--no-print-directory", "rpm", "DIST="+dist)
	srpm := globOne(t, filepath.Join(dist, pkgName+"-*.src.rpm"))
	binRPM := globOne(t, filepath.Join(dist, pkgName+"-*.x86_64.rpm"))
	globOne(t, filepath.Join(dist, pkgName+"-*.tar.gz"))
	if _, err := os.Stat(filepath.Join(repo, "vendor")); err == nil {
		t.Error("make tarball left a vendor/ directory in the work tree")
	}

	t.Run("contents", func(t *testing.T) { testContents(t, repo, binRPM, srpm) })
	t.Run("rpmlint", func(t *testing.T) { testRpmlint(t, repo, binRPM, srpm) })
	t.Run("offline-rebuild", func(t *testing.T) { testOfflineRebuild(t, srpm, binRPM) })
	root := t.TempDir()
	t.Run("scratch-root", func(t *testing.T) { testScratchRoot(t, repo, root, binRPM) })
	t.Run("systemd", func(t *testing.T) { testSystemd(t, root) })
	t.Run("check-config", func(t *testing.T) { testCheckConfig(t, root) })
	t.Run("sudoers", func(t *testing.T) { testSudoers(t, root, binRPM) })
	t.Run("erase", func(t *testing.T) {
		r := runCmd(t, "", nil, "rpm", "--root", root, "--nodeps", "-e", pkgName)
		if r.code != 0 || scriptletErrors(r.out) != "" {
			t.Fatalf("rpm -e in the scratch root exited %d:\n%s", r.code, r.out)
		}
		if _, err := os.Stat(filepath.Join(root, "usr/bin", pkgName)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the binary is still there after rpm -e: %v", err)
		}
	})
}

// wantFiles are the paths acceptance 1 names: binary, unit, sysusers,
// sudoers, sysconfig, config, dashboards and rules.
var wantFiles = []string{
	"/usr/bin/plateau_exporter",
	"/usr/libexec/plateau_exporter/plateau_backtest",
	"/usr/lib/systemd/system/plateau_exporter.service",
	"/usr/lib/sysusers.d/plateau_exporter.conf",
	"/etc/sudoers.d/plateau_exporter",
	"/etc/sysconfig/plateau_exporter",
	"/etc/plateau_exporter/plateau.yml",
	"/usr/lib/udev/rules.d/60-plateau_exporter-nvme.rules",
	"/usr/share/plateau_exporter/gpfs-sudo.conf",
	"/usr/share/plateau_exporter/slurm/epilog.sh",
	"/usr/share/doc/plateau_exporter/README.md",
	"/var/lib/plateau_exporter",
}

// shippedDashboards lists what the RPM must carry from dashboards/.
func shippedDashboards(t *testing.T, repo string) []string {
	t.Helper()
	var want []string
	js, _ := filepath.Glob(filepath.Join(repo, "dashboards", "*.json"))
	for _, f := range js {
		want = append(want, "/usr/share/plateau_exporter/dashboards/"+filepath.Base(f))
	}
	ys, _ := filepath.Glob(filepath.Join(repo, "dashboards", "*.yml"))
	for _, f := range ys {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^groups:`).Match(data) {
			want = append(want, "/usr/share/plateau_exporter/rules/"+filepath.Base(f))
		} else {
			want = append(want, "/usr/share/plateau_exporter/"+filepath.Base(f))
		}
	}
	if _, err := os.Stat(filepath.Join(repo, "dashboards", "RUNBOOK.md")); err == nil {
		want = append(want, "/usr/share/plateau_exporter/RUNBOOK.md")
	}
	if len(js) == 0 || len(ys) == 0 {
		t.Fatalf("dashboards/ has %d dashboards and %d rule files; the package must ship both", len(js), len(ys))
	}
	return append(want, shippedDocs(t, repo)...)
}

// shippedDocs lists the documentation the RPM carries beside
// packaging/README.md: the configuration reference, the changelog and
// every guide in docs/.
func shippedDocs(t *testing.T, repo string) []string {
	t.Helper()
	const doc = "/usr/share/doc/plateau_exporter/"
	want := []string{doc + "CONFIGURATION.md", doc + "CHANGELOG.md"}
	guides, _ := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if len(guides) == 0 {
		t.Fatal("docs/ has no guide; the package must ship them")
	}
	for _, f := range guides {
		want = append(want, doc+"docs/"+filepath.Base(f))
	}
	return want
}

func testContents(t *testing.T, repo, binRPM, srpm string) {
	list := mustRun(t, "", nil, "rpm", "-qlp", binRPM)
	have := map[string]bool{}
	for _, l := range strings.Split(list, "\n") {
		have[strings.TrimSpace(l)] = true
	}
	want := append(append([]string{}, wantFiles...), shippedDashboards(t, repo)...)
	for _, f := range want {
		if !have[f] {
			t.Errorf("rpm -qlp does not list %s", f)
		}
	}
	for _, f := range []string{"rules.yml", "alerts.yml", "fleet_alerts.yml"} {
		if !have["/usr/share/plateau_exporter/rules/"+f] {
			t.Errorf("the rule file %s is not in /usr/share/plateau_exporter/rules/", f)
		}
	}
	if !have["/usr/share/plateau_exporter/federate.yml"] {
		t.Error("the global Prometheus's federation job federate.yml is not in /usr/share/plateau_exporter/")
	}
	licenses := 0
	for f := range have {
		if strings.HasPrefix(f, "/usr/share/licenses/plateau_exporter/vendor-licenses/") {
			licenses++
		}
	}
	if licenses < 10 {
		t.Errorf("only %d vendored license files are packaged", licenses)
	}

	// %config(noreplace): rpm prints the flags "c" and "n".
	flags := mustRun(t, "", nil, "rpm", "-qp", "--qf", `[%{FILENAMES} %{FILEFLAGS:fflags}\n]`, binRPM)
	for _, f := range []string{"/etc/plateau_exporter/plateau.yml", "/etc/sysconfig/plateau_exporter", "/etc/sudoers.d/plateau_exporter"} {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(f) + ` (\S*)$`).FindStringSubmatch(flags)
		if m == nil || !strings.Contains(m[1], "c") || !strings.Contains(m[1], "n") {
			t.Errorf("%s is not %%config(noreplace): flags %v", f, m)
		}
	}

	scripts := mustRun(t, "", nil, "rpm", "-qp", "--scripts", binRPM)
	for _, want := range []string{
		"preinstall scriptlet", "useradd -r -g plateau", // the sysusers fallback on EL8/Debian
		"postinstall scriptlet", "preset plateau_exporter.service",
		"preuninstall scriptlet", "disable --now plateau_exporter.service",
		"postuninstall scriptlet", "try-restart plateau_exporter.service",
	} {
		if !strings.Contains(scripts, want) {
			t.Errorf("rpm -qp --scripts lacks %q:\n%s", want, scripts)
		}
	}
	// Every scriptlet must at least be valid shell.
	for _, tag := range []string{"PREIN", "POSTIN", "PREUN", "POSTUN"} {
		body := mustRun(t, "", nil, "rpm", "-qp", "--qf", "%{"+tag+"}", binRPM)
		if r := runCmd(t, "", nil, "sh", "-n", "-c", body); r.code != 0 {
			t.Errorf("%s scriptlet is not valid sh: %s\n%s", tag, r.out, body)
		}
	}

	// The version information of the binary comes through the SRPM: the
	// revision of the tree must be in it.
	rev := strings.TrimSpace(mustRun(t, repo, nil, "git", "rev-parse", "HEAD"))
	spec := mustRun(t, "", nil, "rpm", "-qp", "--qf", "%{VERSION}-%{RELEASE}", srpm)
	verRel := strings.Fields(mustRun(t, repo, nil, "sh", "packaging/version.sh"))
	if spec != verRel[0]+"-"+verRel[1] {
		t.Errorf("SRPM is %s, version.sh says %s-%s", spec, verRel[0], verRel[1])
	}
	bin := filepath.Join(t.TempDir(), "bin")
	extractFile(t, binRPM, "/usr/bin/plateau_exporter", bin)
	out := mustRun(t, "", nil, bin, "--version")
	if !strings.Contains(out, rev) {
		t.Errorf("the packaged binary's --version lacks revision %s:\n%s", rev, out)
	}

	// backtest is run by plateau_backtest in /usr/libexec/plateau_exporter/:
	// the packaged plateau_exporter finds it there and hands it the
	// arguments, and its error (a CSV that does not exist) is the command's.
	root := t.TempDir()
	for _, f := range []string{"/usr/bin/plateau_exporter", "/usr/libexec/plateau_exporter/plateau_backtest"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		extractFile(t, binRPM, f, filepath.Join(root, f))
	}
	missing := filepath.Join(root, "no-such-runs.csv")
	r := runCmd(t, "", nil, filepath.Join(root, "usr/bin/plateau_exporter"), "backtest", "--input", missing)
	if r.code != 1 || !strings.Contains(r.out, "plateau_exporter backtest:") || !strings.Contains(r.out, missing) {
		t.Errorf("the packaged plateau_exporter backtest --input %s exited %d, not 1 with plateau_backtest's error naming the file:\n%s", missing, r.code, r.out)
	}
}

// extractFile copies one file out of an RPM without installing it.
func extractFile(t *testing.T, rpmFile, path, dest string) {
	t.Helper()
	dir := t.TempDir()
	mustRun(t, dir, nil, "sh", "-c", `rpm2cpio "$1" | cpio -idm --quiet ".$2"`, "sh", rpmFile, path)
	data, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dest, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func testRpmlint(t *testing.T, repo, binRPM, srpm string) {
	rc := filepath.Join(repo, "packaging", "rpm", pkgName+".rpmlintrc")
	r := runCmd(t, "", nil, "rpmlint", "-r", rc, srpm, binRPM)
	if r.code != 0 || !strings.Contains(r.out, "0 errors, 0 warnings") {
		t.Errorf("rpmlint exited %d:\n%s", r.code, r.out)
	}
	// A filter without a reason above it is not allowed.
	data, err := os.ReadFile(rc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "addFilter(") {
			j := i - 1
			for j >= 0 && strings.HasPrefix(lines[j], "addFilter(") {
				j--
			}
			if j < 0 || !strings.HasPrefix(lines[j], "#") {
				t.Errorf("rpmlintrc line %d has no comment saying why: %s", i+1, l)
			}
		}
	}
}

func testOfflineRebuild(t *testing.T, srpm, binRPM string) {
	top, out := t.TempDir(), t.TempDir()
	gopath, modcache, gocache := t.TempDir(), t.TempDir(), t.TempDir()
	env := envWith("GOFLAGS=-mod=vendor", "GOPROXY=off", "GOPATH="+gopath,
		"GOMODCACHE="+modcache, "GOCACHE="+gocache, "GOTOOLCHAIN=local")
	// A new network namespace has only a downed loopback: no module, no
	// toolchain and no checksum database can be reached, whatever Go tries.
	r := runCmd(t, "", env, "unshare", "--net", "rpmbuild", "--rebuild", "--nodeps",
		"--define", "_topdir "+top, "--define", "_rpmdir "+out,
		"--define", "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm", srpm)
	if r.code != 0 {
		t.Fatalf("rpmbuild --rebuild without network exited %d:\n%s", r.code, tail(r.out, 60))
	}
	rebuilt := globOne(t, filepath.Join(out, pkgName+"-*.x86_64.rpm"))
	entries, err := os.ReadDir(modcache)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the offline rebuild put %d entries into the empty module cache", len(entries))
	}
	a := mustRun(t, "", nil, "rpm", "-qlp", binRPM)
	b := mustRun(t, "", nil, "rpm", "-qlp", rebuilt)
	if a != b {
		t.Errorf("the offline rebuild packages other files than make rpm:\n%s\nvs\n%s", a, b)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// copyWithLibs copies a host executable and the shared libraries ldd names
// into root, so the scriptlets can really run there.
func copyWithLibs(t *testing.T, root, bin string) {
	t.Helper()
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	libs := regexp.MustCompile(`/\S+`).FindAllString(mustRun(t, "", nil, "ldd", real), -1)
	files := append([]string{real}, libs...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if real != bin {
		dst := filepath.Join(root, bin)
		if _, err := os.Lstat(dst); err != nil {
			if err := os.Symlink(real, dst); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// scriptletErrors returns the lines of rpm's output that report a problem,
// apart from the notice Debian's rpm prints on every install.
func scriptletErrors(out string) string {
	var bad []string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.Contains(l, "use Alien instead") || strings.Contains(l, "assuming you know what you are doing") {
			continue
		}
		bad = append(bad, l)
	}
	return strings.Join(bad, "\n")
}

// makeScratchRoot builds a minimal merged-/usr root in which rpm can run the
// package's scriptlets: a shell, getent, groupadd and useradd (for the %pre
// that creates the user), kill (named by ExecReload=), /dev/null, the shadow
// files, and the host's systemd units so systemd-analyze can resolve the
// unit's dependencies.
func makeScratchRoot(t *testing.T, root string) {
	t.Helper()
	for _, d := range []string{"usr/bin", "usr/sbin", "etc", "dev", "usr/lib/systemd/system"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/sbin", "sbin"}} {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"/usr/bin/sh", "/usr/bin/getent", "/usr/sbin/groupadd", "/usr/sbin/useradd", "/usr/bin/kill"} {
		copyWithLibs(t, root, b)
	}
	files := map[string]string{
		"etc/passwd":  "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":   "root:x:0:\n",
		"etc/shadow":  "root:*:19000:0:99999:7:::\n",
		"etc/gshadow": "root:*::\n",
	}
	for f, c := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte(c), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mknod(filepath.Join(root, "dev/null"), syscall.S_IFCHR|0o666, int(1<<8|3)); err != nil {
		t.Fatalf("mknod /dev/null in the scratch root: %v", err)
	}
	mustRun(t, "", nil, "cp", "-a", "/usr/lib/systemd/system/.", filepath.Join(root, "usr/lib/systemd/system"))
}

// lookupID finds name's numeric ID in a passwd or group file.
func lookupID(t *testing.T, file, name string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Split(l, ":")
		if len(f) > 2 && f[0] == name {
			id, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
	}
	t.Fatalf("%s has no %s: the %%pre scriptlet did not create it", file, name)
	return -1
}

func testScratchRoot(t *testing.T, repo, root, binRPM string) {
	makeScratchRoot(t, root)
	r := runCmd(t, "", nil, "rpm", "--root", root, "--nodeps", "-i", binRPM)
	if r.code != 0 {
		t.Fatalf("rpm --root -i exited %d:\n%s", r.code, r.out)
	}
	if bad := scriptletErrors(r.out); bad != "" {
		t.Errorf("the install printed problems:\n%s", bad)
	}
	uid := lookupID(t, filepath.Join(root, "etc/passwd"), "plateau")
	gid := lookupID(t, filepath.Join(root, "etc/group"), "plateau")
	if uid == 0 || gid == 0 {
		t.Fatalf("plateau got uid %d gid %d", uid, gid)
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), ":/var/lib/plateau_exporter:/sbin/nologin") {
		t.Errorf("plateau's home or shell is not the state directory and nologin:\n%s", passwd)
	}

	type want struct {
		path     string
		mode     fs.FileMode
		uid, gid int
	}
	wants := []want{
		{"/usr/bin/plateau_exporter", 0o755, 0, 0},
		{"/usr/lib/systemd/system/plateau_exporter.service", 0o644, 0, 0},
		{"/usr/lib/sysusers.d/plateau_exporter.conf", 0o644, 0, 0},
		{"/usr/lib/udev/rules.d/60-plateau_exporter-nvme.rules", 0o644, 0, 0},
		{"/etc/plateau_exporter", fs.ModeDir | 0o755, 0, 0},
		{"/etc/plateau_exporter/plateau.yml", 0o644, 0, 0},
		{"/etc/sysconfig/plateau_exporter", 0o644, 0, 0},
		{"/etc/sudoers.d/plateau_exporter", 0o440, 0, 0},
		{"/usr/share/plateau_exporter/gpfs-sudo.conf", 0o644, 0, 0},
		{"/usr/share/plateau_exporter/slurm/epilog.sh", 0o755, 0, 0},
		{"/var/lib/plateau_exporter", fs.ModeDir | 0o750, uid, gid},
	}
	for _, f := range shippedDashboards(t, repo) {
		wants = append(wants, want{f, 0o644, 0, 0})
	}
	for _, w := range wants {
		fi, err := os.Lstat(filepath.Join(root, w.path))
		if err != nil {
			t.Errorf("%s: %v", w.path, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != w.mode || int(st.Uid) != w.uid || int(st.Gid) != w.gid {
			t.Errorf("%s is %v %d:%d, want %v %d:%d", w.path, fi.Mode(), st.Uid, st.Gid, w.mode, w.uid, w.gid)
		}
	}
	if r := runCmd(t, "", nil, "rpm", "--root", root, "-V", "--nodeps", pkgName); r.code != 0 || r.out != "" {
		t.Errorf("rpm -V in the scratch root exited %d:\n%s", r.code, r.out)
	}
}

// securityReport runs systemd's offline security analysis of the unit in
// root and returns each check's "set" by its JSON field.
func securityReport(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := mustRun(t, "", nil, "systemd-analyze", "security", "--offline=true", "--root="+root, "--json=short", "plateau_exporter.service")
	var checks []struct {
		Field string `json:"json_field"`
		Set   bool   `json:"set"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &checks); err != nil {
		t.Fatalf("systemd-analyze security output: %v\n%s", err, out)
	}
	m := map[string]bool{}
	for _, c := range checks {
		m[c.Field] = c.Set
	}
	return m
}

func verifyUnit(t *testing.T, root string) {
	t.Helper()
	// verify prints but does not fail on a directive it cannot parse, so any
	// output at all is a failure.
	r := runCmd(t, "", nil, "systemd-analyze", "verify", "--root="+root, "/usr/lib/systemd/system/plateau_exporter.service")
	if r.code != 0 || strings.TrimSpace(r.out) != "" {
		t.Errorf("systemd-analyze verify exited %d:\n%s", r.code, r.out)
	}
}

func testSystemd(t *testing.T, root string) {
	verifyUnit(t, root)
	sec := securityReport(t, root)
	for _, f := range []string{"UserOrDynamicUser", "NoNewPrivileges", "PrivateTmp", "ProtectHome",
		"ProtectKernelTunables", "ProtectKernelModules", "ProtectControlGroups", "RestrictRealtime"} {
		if !sec[f] {
			t.Errorf("systemd does not see %s in effect", f)
		}
	}
	// The bounding set is CAP_SYS_ADMIN and nothing else.
	caps := 0
	for f, set := range sec {
		if !strings.HasPrefix(f, "CapabilityBoundingSet_") {
			continue
		}
		caps++
		if f == "CapabilityBoundingSet_CAP_SYS_ADMIN" {
			if set {
				t.Error("CAP_SYS_ADMIN is not in the bounding set: the NVMe SMART ioctl would fail")
			}
		} else if !set {
			t.Errorf("the bounding set keeps more than CAP_SYS_ADMIN: %s", f)
		}
	}
	if caps < 20 {
		t.Errorf("systemd reported only %d capability checks", caps)
	}

	// With the packaged GPFS sudo drop-in, sudo can gain root: no
	// NoNewPrivileges and a bounding set that allows setuid.
	dropin := filepath.Join(root, "etc/systemd/system/plateau_exporter.service.d")
	if err := os.MkdirAll(dropin, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "usr/share/plateau_exporter/gpfs-sudo.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dropin, "gpfs-sudo.conf"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(filepath.Join(root, "etc/systemd"))
	verifyUnit(t, root)
	sec = securityReport(t, root)
	if sec["NoNewPrivileges"] {
		t.Error("with gpfs-sudo.conf NoNewPrivileges is still on: sudo cannot work")
	}
	for f, set := range sec {
		if strings.HasPrefix(f, "CapabilityBoundingSet_CAP_SET") && set {
			t.Errorf("with gpfs-sudo.conf the bounding set still lacks %s: sudo cannot switch to root", f)
		}
	}
	if !sec["PrivateTmp"] || !sec["ProtectHome"] || !sec["UserOrDynamicUser"] {
		t.Error("gpfs-sudo.conf dropped more hardening than NoNewPrivileges and the bounding set")
	}
}

// ensureDir creates dir if it is missing and removes it at cleanup only in
// that case.
func ensureDir(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); err == nil {
		return
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
}

func testCheckConfig(t *testing.T, root string) {
	bin := filepath.Join(root, "usr/bin/plateau_exporter")
	conf := filepath.Join(root, "etc/plateau_exporter/plateau.yml")
	// The active target is the state directory that systemd creates on a
	// real node.
	ensureDir(t, "/var/lib/plateau_exporter")
	if r := runCmd(t, "", nil, bin, "check-config", "--config.file", conf); r.code != 0 {
		t.Errorf("check-config of the packaged plateau.yml exited %d:\n%s", r.code, r.out)
	}

	// The commented GPFS and NFS examples, switched on, with their paths
	// moved to directories that exist here.
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	text, n := uncommentExamples(t, string(data))
	if n != 2 {
		t.Fatalf("found %d example targets, want 2", n)
	}
	tmp := t.TempDir()
	for _, p := range []string{"/gpfs/scratch/.plateau", "/nfs/projects/.plateau"} {
		local := filepath.Join(tmp, filepath.Base(filepath.Dir(p)))
		if err := os.MkdirAll(local, 0o755); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, "path: "+p) {
			t.Fatalf("example path %s not found in plateau.yml", p)
		}
		text = strings.ReplaceAll(text, "path: "+p, "path: "+local)
	}
	examples := filepath.Join(tmp, "examples.yml")
	if err := os.WriteFile(examples, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, "", nil, bin, "check-config", "--config.file", examples)
	if r.code != 0 {
		t.Errorf("check-config of the examples exited %d:\n%s", r.code, r.out)
	}
	for _, name := range []string{"scratch", "projects", "seq512k", "seq128k", "md4k"} {
		if !strings.Contains(r.out, name) {
			t.Errorf("check-config of the examples does not list %s:\n%s", name, r.out)
		}
	}
}

// ensurePlateauUser creates the plateau user on the host, if missing, with
// the package's own %pre scriptlet, and removes it at cleanup only then.
func ensurePlateauUser(t *testing.T, binRPM string) {
	t.Helper()
	if runCmd(t, "", nil, "getent", "passwd", "plateau").code == 0 {
		return
	}
	pre := mustRun(t, "", nil, "rpm", "-qp", "--qf", "%{PREIN}", binRPM)
	t.Cleanup(func() {
		runCmd(t, "", nil, "userdel", "plateau")
		if runCmd(t, "", nil, "getent", "group", "plateau").code == 0 {
			runCmd(t, "", nil, "groupdel", "plateau")
		}
	})
	mustRun(t, "", nil, "sh", "-c", pre, "pre", "1")
	if runCmd(t, "", nil, "getent", "passwd", "plateau").code != 0 {
		t.Fatal("the pre-install scriptlet did not create the plateau user")
	}
}

// ensureGPFSCommands makes sure the command paths exist, since sudo -l
// resolves them: a GPFS node has them; elsewhere empty executables are put
// in place for the duration of the test.
func ensureGPFSCommands(t *testing.T) {
	t.Helper()
	const lpp = "/usr/lpp"
	if _, err := os.Stat(lpp); err == nil {
		return
	}
	t.Cleanup(func() { os.RemoveAll(lpp) })
	bin := filepath.Join(lpp, "mmfs/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"mmpmon", "mmgetstate", "mmhealth", "mmdiag", "mmfsadm", "mmlsfs", "mmlsdisk", "mmlsqos", "mmchconfig"} {
		if err := os.WriteFile(filepath.Join(bin, c), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func testSudoers(t *testing.T, root, binRPM string) {
	snippet := filepath.Join(root, "etc/sudoers.d/plateau_exporter")
	if out := mustRun(t, "", nil, "visudo", "-c", "-f", snippet); !strings.Contains(out, "parsed OK") {
		t.Fatalf("visudo -c -f: %s", out)
	}
	ensurePlateauUser(t, binRPM)
	ensureGPFSCommands(t)

	data, err := os.ReadFile(snippet)
	if err != nil {
		t.Fatal(err)
	}
	dropin := "/etc/sudoers.d/zz-plateau-exporter-test"
	if err := os.WriteFile(dropin, data, 0o440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dropin) })
	if r := runCmd(t, "", nil, "visudo", "-c"); r.code != 0 {
		t.Fatalf("the whole sudoers configuration no longer parses with the snippet:\n%s", r.out)
	}

	list := mustRun(t, "", nil, "sudo", "-n", "-l", "-U", "plateau")
	// Only the commands section: the Defaults section repeats the commands
	// the !use_pty setting applies to.
	_, granted, _ := strings.Cut(list, "may run the following commands")
	grants := regexp.MustCompile(`!?/usr/lpp/mmfs/bin/\S+( [^,\n]+)?`).FindAllString(granted, -1)
	// The fixed command lines, then the per-file-system patterns and the
	// refusal of every device part with another character (see the
	// sudoers file for why it takes two patterns).
	fixed := gpfsWholeCommands()
	want := append(append([]string{}, fixed...),
		"/usr/lpp/mmfs/bin/mmlsdisk [A-Za-z0-9_]* -Y",
		"/usr/lpp/mmfs/bin/mmlsqos [A-Za-z0-9_]* -Y",
		"!/usr/lpp/mmfs/bin/mmlsdisk *[!A-Za-z0-9_.-]* -Y",
		"!/usr/lpp/mmfs/bin/mmlsqos *[!A-Za-z0-9_.-]* -Y",
	)
	if strings.Join(grants, "|") != strings.Join(want, "|") {
		t.Errorf("sudo -l -U plateau grants %q, want %q:\n%s", grants, want, list)
	}
	if strings.Count(list, "NOPASSWD") != 1 || strings.Contains(list, "ALL\n") || strings.Contains(list, "(ALL") {
		t.Errorf("sudo -l -U plateau shows more than the GPFS commands as root:\n%s", list)
	}

	// Exactly the command lines the collector runs, with device names as
	// validGPFSDevice (collector/gpfs_parse.go) accepts them.
	allowed := append([]string{}, fixed...)
	for _, dev := range []string{"scratch", "gpfs01", "fs_a-b.c", "9", "_x"} {
		allowed = append(allowed, "/usr/lpp/mmfs/bin/mmlsdisk "+dev+" -Y", "/usr/lpp/mmfs/bin/mmlsqos "+dev+" -Y")
	}
	for _, c := range allowed {
		args := append([]string{"-n", "-l", "-U", "plateau"}, strings.Fields(c)...)
		if r := runCmd(t, "", nil, "sudo", args...); r.code != 0 {
			t.Errorf("sudo does not allow plateau %q (exit %d): %s", c, r.code, r.out)
		}
	}
	for _, c := range []string{
		"/usr/lpp/mmfs/bin/mmpmon",
		"/usr/lpp/mmfs/bin/mmpmon -p",
		"/usr/lpp/mmfs/bin/mmpmon -p -s",
		"/usr/lpp/mmfs/bin/mmpmon -p -s -i /etc/shadow",
		"/usr/lpp/mmfs/bin/mmpmon -p -s -i /tmp/mmpmon-client.requests",
		"/usr/lpp/mmfs/bin/mmgetstate -a -Y",
		"/usr/lpp/mmfs/bin/mmhealth node show",
		"/usr/lpp/mmfs/bin/mmhealth cluster show -Y",
		"/usr/lpp/mmfs/bin/mmchconfig",
		"/bin/sh",
		"/usr/bin/id",
		"/usr/lpp/mmfs/bin/mmdiag --waiters",
		"/usr/lpp/mmfs/bin/mmdiag --iohist -Y",
		"/usr/lpp/mmfs/bin/mmdiag --iohist verbose",
		"/usr/lpp/mmfs/bin/mmdiag --iohist --waiters",
		"/usr/lpp/mmfs/bin/mmdiag --iohist --all",
		"/usr/lpp/mmfs/bin/mmdiag --all",
		"/usr/lpp/mmfs/bin/mmdiag",
		"/usr/lpp/mmfs/bin/mmdiag --waiters -Y --all",
		"/usr/lpp/mmfs/bin/mmfsadm dump all",
		"/usr/lpp/mmfs/bin/mmfsadm test verbs",
		"/usr/lpp/mmfs/bin/mmlsfs all -Y",
		"/usr/lpp/mmfs/bin/mmlsfs scratch -T -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk",
		"/usr/lpp/mmfs/bin/mmlsdisk -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk scratch",
		"/usr/lpp/mmfs/bin/mmlsdisk scratch -L -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk scratch -Y -L",
		"/usr/lpp/mmfs/bin/mmlsdisk scratch -Y -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk scratch;id -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk /dev/scratch -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk ../etc -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk .hidden -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk -d -Y",
		"/usr/lpp/mmfs/bin/mmlsdisk scr*tch -Y",
		"/usr/lpp/mmfs/bin/mmlsqos scratch",
		"/usr/lpp/mmfs/bin/mmlsqos scratch --seconds 999 -Y",
		"/usr/lpp/mmfs/bin/mmlsqos scratch -Y --fine-stats 0-",
		"/usr/lpp/mmfs/bin/mmlsqos a,b -Y",
		"/usr/lpp/mmfs/bin/mmchqos scratch --disable",
	} {
		args := append([]string{"-n", "-l", "-U", "plateau"}, strings.Fields(c)...)
		if r := runCmd(t, "", nil, "sudo", args...); r.code == 0 {
			t.Errorf("sudo allows plateau %q, which the collector never runs", c)
		}
	}
	testLustreSudoers(t)
}

// testLustreSudoers holds the lustre collector's two lctl lines and the
// lnet collector's two lnetctl lines (with --collector.lustre.sudo) to
// exactly what they run: the '*' are lctl's patterns, passed as typed, and
// match only themselves in sudoers.
func testLustreSudoers(t *testing.T) {
	const lctl, lnetctl = "/usr/sbin/lctl", "/usr/sbin/lnetctl"
	for _, p := range []string{lctl, lnetctl} {
		if _, err := os.Stat(p); err != nil {
			if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(p) })
		}
	}
	sudoList := func(cmd ...string) int {
		return runCmd(t, "", nil, "sudo", append([]string{"-n", "-l", "-U", "plateau"}, cmd...)...).code
	}
	for _, c := range [][]string{
		{lctl, "get_param", "osc.*.rpc_stats", "llite.*.stats"},
		{lctl, "get_param", "osc.*.import", "osc.*.state", "mdc.*.import", "mdc.*.state"},
		{lnetctl, "net", "show", "-v", "2"},
		{lnetctl, "peer", "show", "-v", "2"},
	} {
		if code := sudoList(c...); code != 0 {
			t.Errorf("sudo does not allow plateau %q, which the collectors run (exit %d)", c, code)
		}
	}
	for _, c := range [][]string{
		{lctl},
		{lctl, "get_param", "osc.*.rpc_stats"},
		{lctl, "get_param", "osc.x.rpc_stats", "llite.*.stats"},
		{lctl, "get_param", "-R", "osc.*.rpc_stats", "llite.*.stats"},
		{lctl, "get_param", "osc.*.rpc_stats", "llite.*.stats", "mdc.*.import"},
		{lctl, "set_param", "osc.*.rpc_stats=0"},
		{lctl, "get_param", "-n", "osc.*.rpc_stats", "llite.*.stats"},
		{lctl, "get_param", "osc.*.import"},
		{lctl, "get_param", "mdc.*.import", "mdc.*.state", "osc.*.import", "osc.*.state"},
		{lctl, "get_param", "osc.*.import", "osc.*.state", "mdc.*.import", "mdc.*.state", "mgc.*.import"},
		{lctl, "set_param", "osc.*.import=connection=x"},
		{lnetctl},
		{lnetctl, "net", "show"},
		{lnetctl, "net", "show", "-v", "4"},
		{lnetctl, "peer", "show", "-v", "2", "--nid", "10.0.0.1@tcp"},
		{lnetctl, "net", "set", "--health", "0", "--all"},
		{lnetctl, "peer", "del", "--prim_nid", "10.0.0.1@tcp"},
		{lnetctl, "lnet", "unconfigure"},
		{lnetctl, "import", "/tmp/x.yaml"},
	} {
		if sudoList(c...) == 0 {
			t.Errorf("sudo allows plateau %q, which the collectors never run", c)
		}
	}
}

// TestVersionOrder checks, with rpm's own comparison, that the versions
// version.sh gives a repository's history sort in the order they were made:
// snapshots after a tag above it, a pre-release below its release.
func TestVersionOrder(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	n := 0
	commits := func(k int) {
		for i := 0; i < k; i++ {
			n++
			commit(t, dir, strconv.Itoa(n))
		}
	}
	var seq []string
	record := func() {
		f := strings.Fields(versionOf(t, dir))
		seq = append(seq, f[0]+"-"+f[1])
	}
	commits(3)
	record() // 0.0.0-0.3.g...
	commits(9)
	record() // 0.0.0-0.12.g...
	git(t, dir, "tag", "v1.0.0-rc.1")
	record()
	commits(1)
	record()
	git(t, dir, "tag", "v1.0.0")
	record()
	commits(2)
	record()
	commits(8)
	record()
	git(t, dir, "tag", "v1.0.1")
	record()
	for i := 1; i < len(seq); i++ {
		expr := fmt.Sprintf(`%%{lua:print(rpm.vercmp("%s", "%s"))}`, seq[i-1], seq[i])
		got := strings.TrimSpace(mustRun(t, "", nil, "rpm", "--eval", expr))
		if got != "-1" {
			t.Errorf("rpm sorts %s at or after %s (vercmp %s); history order: %v", seq[i-1], seq[i], got, seq)
		}
	}
}
