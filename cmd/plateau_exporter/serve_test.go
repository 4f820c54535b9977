package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// A scrape reads a snapshot: it must answer while a probe runs, in far
// less time than the probe takes.
func TestScrapeDoesNotWaitForProbe(t *testing.T) {
	cfg, _ := writeConfig(t, "{name: big, kind: sequential, workers: 2, file_size: 256MiB, block_size: 4MiB, interval: 8s, timeout: 7s, splay: false}")
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	var during []time.Duration
	deadline := time.Now().Add(90 * time.Second)
	for successes(d.metrics()) < 1 || len(during) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no probe run observed in 90s (%d scrapes during a run)", len(during))
		}
		start := time.Now()
		body := d.metrics()
		took := time.Since(start)
		if value(body, "plateau_probe_in_progress{") == 1 {
			during = append(during, took)
		}
		time.Sleep(5 * time.Millisecond)
	}
	body := d.metrics()
	runSeconds := value(body, "plateau_probe_duration_seconds{")
	sort.Slice(during, func(i, j int) bool { return during[i] < during[j] })
	p50, p99, worst := during[len(during)/2], during[len(during)*99/100], during[len(during)-1]
	t.Logf("%d scrapes while a %.2fs probe ran: p50 %s, p99 %s, max %s", len(during), runSeconds, p50, p99, worst)
	if len(during) < 3 {
		t.Fatalf("only %d scrapes completed during a %.2fs run: scrapes are waiting for the probe", len(during), runSeconds)
	}
	if worst.Seconds() >= runSeconds/2 {
		t.Fatalf("slowest scrape during the run took %s, comparable to the %.2fs run itself", worst, runSeconds)
	}
}

func TestBadConfigRejectedAtStart(t *testing.T) {
	cfg, _ := writeConfig(t, "{name: s, kind: sequential, file_size: 12 parsecs, colour: red}")
	cmd := exec.Command(binary, "--config.file="+cfg, "--web.listen-address="+probetest.FreeAddr(t))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	exitErr, ok := err.(*exec.ExitError)
	if !ok || exitErr.ExitCode() == 0 {
		t.Fatalf("bad config accepted (err %v)", err)
	}
	for _, want := range []string{cfg + ":8: targets[0].probes[0].file_size: invalid size", cfg + ":8: targets[0].probes[0].colour: unknown key"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not name %q:\n%s", want, stderr.String())
		}
	}
}

func TestReloadKeepsRunningConfigOnError(t *testing.T) {
	cfg, target := writeConfig(t, "{name: s, kind: sequential, file_size: 1MiB, block_size: 1MiB}")
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	if v := value(d.metrics(), "plateau_config_last_reload_successful "); v != 1 {
		t.Fatalf("reload_successful = %v at start", v)
	}
	good, _ := os.ReadFile(cfg)
	bad := strings.Replace(string(good), "path: "+target, "path: "+target+"\n    bogus: 1", 1)
	if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	probetest.WaitUntil(t, "reload_successful 0 after SIGHUP with a bad config", 20*time.Second, func() bool {
		return value(d.metrics(), "plateau_config_last_reload_successful ") == 0
	})
	// The log line travels through a pipe; wait for it rather than race it.
	probetest.WaitUntil(t, "a log line naming the bad line and field", 10*time.Second, func() bool {
		return strings.Contains(d.stderr.String(), cfg+":7: targets[0].bogus: unknown key")
	})
	// The old config keeps running: its probe still runs and is exported.
	before := successes(d.metrics())
	probetest.WaitUntil(t, "the old config's probe to keep running", 30*time.Second, func() bool { return successes(d.metrics()) > before })

	// The HTTP reload answers the same error, and only to POST.
	if code, _ := d.get("/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload: HTTP %d, want 405 (no GET side effects)", code)
	}
	resp, err := http.Post(d.url+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("POST /-/reload with a bad config: HTTP %d, want 500", resp.StatusCode)
	}
	if err := os.WriteFile(cfg, good, 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post(d.url+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || value(d.metrics(), "plateau_config_last_reload_successful ") != 1 {
		t.Fatalf("reload of the fixed config: HTTP %d", resp.StatusCode)
	}
}

// kill -9 of the daemon mid-probe leaves the run's files; the next run of a
// new daemon must remove them.
func TestKilledRunLeftoversSweptAfterRestart(t *testing.T) {
	cfg, target := writeConfig(t, "{name: big, kind: sequential, workers: 2, file_size: 256MiB, block_size: 4MiB, interval: 8s, timeout: 7s, splay: false}")
	probeDir := filepath.Join(target, "n1")
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	var runDirs []string
	probetest.WaitUntil(t, "a run directory with data in it", 60*time.Second, func() bool {
		runDirs, _ = filepath.Glob(filepath.Join(probeDir, "run.*"))
		if len(runDirs) != 1 {
			return false
		}
		fi, err := os.Stat(filepath.Join(runDirs[0], "w0.dat"))
		return err == nil && fi.Size() > 0
	})
	workers := childPids(d.cmd.Process.Pid)
	if len(workers) == 0 {
		t.Fatal("no worker process found under the daemon during a run")
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	// The worker dies with its parent (parent-death signal); its files stay.
	for _, pid := range workers {
		probetest.WaitUntil(t, "the orphaned worker to die", 20*time.Second, func() bool {
			stat, err := os.ReadFile("/proc/" + pid + "/stat")
			return err != nil || strings.Contains(string(stat), ") Z ")
		})
	}
	if _, err := os.Stat(runDirs[0]); err != nil {
		t.Fatalf("the killed run left nothing to sweep (%v); the test proves nothing", err)
	}
	d2 := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	probetest.WaitUntil(t, "the new daemon's first successful run", 60*time.Second, func() bool { return successes(d2.metrics()) >= 1 })
	if _, err := os.Stat(runDirs[0]); !os.IsNotExist(err) {
		t.Fatalf("killed run's directory %s survived the first run after restart (%v)", runDirs[0], err)
	}
	entries, _ := os.ReadDir(probeDir)
	for _, e := range entries {
		if e.Name() != ".lock" {
			t.Errorf("left in the probe directory after the first run: %s", e.Name())
		}
	}
}

// childPids lists a process's children from /proc/<pid>/task/*/children.
func childPids(pid int) []string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []string
	for _, task := range tasks {
		data, _ := os.ReadFile(task)
		pids = append(pids, strings.Fields(string(data))...)
	}
	return pids
}

// At boot the daemon starts before GPFS mounts its file systems: a missing
// target path is logged, the daemon serves, the probe fails with reason
// enoent and never creates the path, and once the path appears the probe
// runs.
func TestMissingTargetPathAtStart(t *testing.T) {
	cfg, target := writeConfig(t, "{name: s, kind: sequential, file_size: 1MiB, block_size: 1MiB}")
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults")
	probetest.WaitUntil(t, "a log line naming the missing path", 10*time.Second, func() bool {
		return strings.Contains(d.stderr.String(), "target path not usable") && strings.Contains(d.stderr.String(), target)
	})
	enoent := `plateau_probe_errors_total{kind="sequential",probe="s",reason="enoent",target="e2e"} `
	probetest.WaitUntil(t, "a run failing with reason enoent", 60*time.Second, func() bool {
		return value(d.metrics(), enoent) >= 1
	})
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the probe created its missing target path (%v); it must wait for the mount", err)
	}
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	probetest.WaitUntil(t, "the probe to succeed once the path exists", 60*time.Second, func() bool {
		return successes(d.metrics()) >= 1
	})
	if v := value(d.metrics(), "plateau_config_last_reload_successful "); v != 1 {
		t.Errorf("reload_successful = %v; a missing path is not a config error", v)
	}
}

// check-config, unlike the daemon, fails on a missing target path: it is
// what an administrator runs to check the config before deploying it.
func TestCheckConfigFailsOnMissingPath(t *testing.T) {
	cfg, target := writeConfig(t, "{name: s, kind: sequential}")
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "check-config", "--config.file="+cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "targets[0].path") {
		t.Errorf("check-config with a missing path: %v\n%s", err, out)
	}
}
