package alertstack

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/procgroup"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/wait"
)

// RequirePrereqs fails, naming what is missing and where it comes
// from, unless this process can run the alerting integration tests.
func RequirePrereqs(t *testing.T) (prometheus, alertmanager string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the alerting integration tests need root (loop device, mount, blkio cgroup); run `make integration` as root (euid is %d)", os.Geteuid())
	}
	var missing []string
	look := func(name, pkg string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", name, pkg))
		}
		return p
	}
	prometheus = look("prometheus", "prometheus")
	alertmanager = look("prometheus-alertmanager", "prometheus-alertmanager")
	look("mkfs.ext4", "e2fsprogs")
	look("losetup", "util-linux")
	look("mount", "mount")
	look("go", "the Go toolchain, to build plateau_exporter")
	if len(missing) > 0 {
		t.Fatalf("missing commands for the alerting integration tests: %s (.ci/packages.txt lists the packages)", strings.Join(missing, ", "))
	}
	return prometheus, alertmanager
}

// Process is a server the tests started, in its own process group so that
// cleanup reaches everything it forked (procgroup).
type Process struct {
	name string
	Cmd  *exec.Cmd
	Log  string
	pg   *procgroup.Proc
}

// startProcess starts argv with its output in a log file of dir, and stops
// its process group in cleanup: SIGTERM, then SIGKILL if it lingers 20s,
// which fails the test (a server must stop on SIGTERM).
func startProcess(t *testing.T, name, dir string, argv ...string) *Process {
	t.Helper()
	p := &Process{name: name, Log: filepath.Join(dir, name+".log"), Cmd: exec.Command(argv[0], argv[1:]...)}
	p.pg = procgroup.Start(t, p.Cmd, procgroup.Options{Name: name, Log: p.Log, Grace: 20 * time.Second, SlowStopFails: true})
	return p
}

// Exited says whether the process has exited.
func (p *Process) Exited() bool { return p.pg.Exited() }

// TailFile is procgroup.TailFile: the last n lines of a log.
func TailFile(path string, n int) string { return procgroup.TailFile(path, n) }

// WaitReady waits until the process answers 200 on url.
func WaitReady(t *testing.T, p *Process, url string) {
	t.Helper()
	WaitFor(t, p.name+" to answer "+url, 2*time.Minute, func() (bool, error) {
		if p.Exited() {
			t.Fatalf("%s exited while starting; its log:\n%s", p.name, TailFile(p.Log, 40))
		}
		_, err := HTTPGet(url)
		return err == nil, err
	})
}

// WaitFor polls cond every waitPoll until it holds, failing the test at
// the deadline with the last error cond gave.
func WaitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	wait.UntilWith(t, wait.Options{Every: waitPoll}, what, timeout, cond)
}

// HTTPClient is what the stack asks its servers with: a deadline on every
// request, so that a hung server fails a wait instead of blocking it.
var HTTPClient = &http.Client{Timeout: 10 * time.Second}

// HTTPGet returns the body of a 200 answer to GET url, or an error that
// names the status and carries the body.
func HTTPGet(url string) ([]byte, error) {
	resp, err := HTTPClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(body))
	}
	return body, nil
}
