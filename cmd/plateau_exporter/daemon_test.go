package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// binary is the plateau_exporter built once for all tests in this package.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plateau-e2e-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "plateau_exporter")
	build := exec.Command("go", "build", "-o", binary,
		"-ldflags", "-X github.com/prometheus/common/version.Version=e2e -X github.com/prometheus/common/version.Revision=e2e -X github.com/prometheus/common/version.Branch=e2e",
		".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build plateau_exporter:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a running plateau_exporter under test.
type daemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	stderr *probetest.LogBuffer
	done   chan struct{}
}

// startDaemon runs the binary with args plus a free listen address and
// waits until it answers /-/healthy.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	addr := probetest.FreeAddr(t)
	d := &daemon{t: t, url: "http://" + addr, stderr: &probetest.LogBuffer{}}
	base := []string{"--web.listen-address=" + addr, "--log.level=debug"}
	// The tests reload over HTTP; a test of the default gate says
	// --no-web.enable-lifecycle.
	if !slices.Contains(args, "--no-web.enable-lifecycle") {
		base = append(base, "--web.enable-lifecycle")
	}
	// No job of the machine running the test may hold its probes: slurmd's
	// traces are looked for in empty trees unless the test names its own
	// (kingpin refuses a repeated flag).
	for _, flag := range []string{"--slurm.cgroup-path", "--slurm.spool-path"} {
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, flag+"=") }) {
			base = append(base, flag+"="+t.TempDir())
		}
	}
	d.cmd = exec.Command(binary, append(base, args...)...)
	d.done = runUntilCleanup(t, d.cmd, d.stderr, nil)
	probetest.WaitUntil(t, "the daemon to answer /-/healthy", 30*time.Second, func() bool {
		failIfExited(t, d.done, d.stderr)
		resp, err := http.Get(d.url + "/-/healthy")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return d
}

// runUntilCleanup starts cmd, its stderr into log, and returns a channel
// closed when it exits. The test's cleanup stops it (SIGTERM, SIGKILL after
// 10 s), then runs after when not nil, and logs what it wrote if the test
// failed.
func runUntilCleanup(t *testing.T, cmd *exec.Cmd, log *probetest.LogBuffer, after func()) chan struct{} {
	t.Helper()
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if after != nil {
			after()
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", log.String())
		}
	})
	return done
}

// failIfExited fails the test with the daemon's log once it has exited:
// a start-up wait would else wait out its deadline for a daemon that is gone.
func failIfExited(t *testing.T, done <-chan struct{}, log *probetest.LogBuffer) {
	t.Helper()
	select {
	case <-done:
		t.Fatalf("daemon exited: %s", log.String())
	default:
	}
}

func (d *daemon) get(path string) (int, string) {
	d.t.Helper()
	resp, err := http.Get(d.url + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (d *daemon) metrics() string {
	d.t.Helper()
	code, body := d.get("/metrics")
	if code != http.StatusOK {
		d.t.Fatalf("/metrics: HTTP %d: %s", code, body)
	}
	return body
}

// value returns the first sample of a series whose line starts with prefix
// (name and, optionally, an opening of its labels), or -1.
func value(metrics, prefix string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

func httpPost(url string) (int, error) {
	resp, err := http.Post(url, "", nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// writeConfig writes a config with one probe on a fresh target directory
// and returns the file and the target directory. The timeout is generous:
// under a parallel `go test ./...` on two cores a 4 MiB run has taken
// close to two seconds.
func writeConfig(t *testing.T, probe string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "plateau.yml")
	cfg := fmt.Sprintf("defaults:\n  interval: 5s\n  timeout: 4800ms\ntargets:\n  - name: e2e\n    path: %s\n    probes:\n      - %s\n", target, probe)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, target
}

func appendLine(t *testing.T, file, line string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(data, []byte(line+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
}

var successLine = regexp.MustCompile(`plateau_probe_runs_total\{[^}]*result="success"[^}]*\} ([0-9.e+]+)`)

func successes(metrics string) float64 {
	m := successLine.FindStringSubmatch(metrics)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
