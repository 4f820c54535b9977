package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// The daemon as an attacker on the same node, or a bad day, would try it:
// signals at start-up, a reload from another site's page, requests with
// odd methods, files far over any real size, a FIFO where a file should
// be, and connections held open until the descriptors run out.

// SIGHUP in the first milliseconds (a log rotation at boot) must not kill
// the daemon: systemd counts death by SIGHUP as a clean exit and does not
// restart it.
func TestHostileSIGHUPDuringStart(t *testing.T) {
	cfg, _ := writeConfig(t, `{name: s, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB}`)
	logs := &probetest.LogBuffer{}
	cmd := exec.Command(binary, "--web.listen-address="+probetest.FreeAddr(t), "--config.file="+cfg, "--collector.disable-defaults",
		"--slurm.cgroup-path="+t.TempDir(), "--slurm.spool-path="+t.TempDir())
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	// The first log line is the earliest sign of the program's own code;
	// from then on, SIGHUP every few milliseconds through the start.
	probetest.PollUntil(t, "the daemon's first log line", time.Millisecond, 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "starting plateau_exporter")
	})
	for i := 0; i < 50; i++ {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("daemon died after SIGHUP %d during start-up: %v\n%s", i+1, err, logs.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		t.Fatalf("daemon died after SIGHUP during start-up: %v\n%s", err, logs.String())
	case <-time.After(500 * time.Millisecond):
	}
}

// POST /-/reload is off by default (SIGHUP stays), and with
// --web.enable-lifecycle a browser's cross-origin "simple" POST from any
// page on the site's network is still refused.
func TestHostileReloadGate(t *testing.T) {
	cfg, _ := writeConfig(t, `{name: s, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB}`)
	crossOrigin := func(url string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/-/reload", strings.NewReader("x"))
		req.Header.Set("Origin", "http://evil.example")
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	d := startDaemon(t, "--config.file="+cfg, "--collector.disable-defaults", "--no-web.enable-lifecycle")
	if code, err := httpPost(d.url + "/-/reload"); err != nil || code != http.StatusForbidden {
		t.Errorf("POST /-/reload without --web.enable-lifecycle: HTTP %d %v, want 403", code, err)
	}
	if code := crossOrigin(d.url); code != http.StatusForbidden {
		t.Errorf("cross-origin POST /-/reload without --web.enable-lifecycle: HTTP %d, want 403", code)
	}
	if n := strings.Count(d.stderr.String(), `msg="config loaded"`); n != 1 {
		t.Errorf("config loaded %d times, want once (no reload)", n)
	}
	e := startDaemon(t, "--config.file="+cfg, "--collector.disable-defaults")
	if code := crossOrigin(e.url); code != http.StatusForbidden {
		t.Errorf("cross-origin POST /-/reload with --web.enable-lifecycle: HTTP %d, want 403", code)
	}
	if code, err := httpPost(e.url + "/-/reload"); err != nil || code != http.StatusOK {
		t.Errorf("same-origin POST /-/reload with --web.enable-lifecycle: HTTP %d %v, want 200", code, err)
	}
}

// Read-only endpoints answer GET and HEAD only, and every page and JSON
// answer says nosniff and may not be framed.
func TestHostileMethodsAndHeaders(t *testing.T) {
	cfg, _ := writeConfig(t, `{name: s, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB}`)
	d := startDaemon(t, "--config.file="+cfg, "--collector.disable-defaults")
	for _, path := range []string{"/metrics", "/-/healthy", "/-/ready", "/", "/status.json"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			req, _ := http.NewRequest(method, d.url+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: HTTP %d, want 405", method, path, resp.StatusCode)
			}
		}
		resp, err := http.Get(d.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", path, got)
		}
		if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q, want frame-ancestors 'none'", path, got)
		}
	}
}

// A history file that is a FIFO (or any non-regular file) is refused at
// once with its name; before, start-up hung on it with nothing logged.
func TestHostileHistoryFIFO(t *testing.T) {
	cfg, _ := writeConfig(t, `{name: s, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB}`)
	fifo := filepath.Join(t.TempDir(), "history.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config.file="+cfg, "--collector.disable-defaults", "--probe.history-file="+fifo)
	probetest.WaitUntil(t, "the FIFO to be named in the log", 10*time.Second, func() bool {
		return strings.Contains(d.stderr.String(), fifo) && strings.Contains(d.stderr.String(), "not a regular file")
	})
}

// maxRSS is the peak resident set of a finished command.
func maxRSS(cmd *exec.Cmd) int64 {
	return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
}

// A 100 MB baselines file and a config with 100,000 unknown keys are
// refused by their size, with the file and the reason, in a bounded
// message, and without reading them into memory: check-config and the
// daemon stay under 64 MiB of RSS.
func TestHostileOversizedFiles(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	baselines := filepath.Join(dir, "baselines.yml")
	f, err := os.Create(baselines)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 100 MB that cost no disk; a reader that reads it all still
	// takes 100 MB.
	if err := f.Truncate(100 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cfg := filepath.Join(dir, "plateau.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("targets:\n  - name: t\n    path: %s\n    probes:\n      - {name: s, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB}\nbaselines_file: %s\n", target, baselines)), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "keys.yml")
	var b strings.Builder
	b.WriteString("targets: []\n")
	for i := 0; i < 100000; i++ {
		fmt.Fprintf(&b, "unknown_key_%06d: 1\n", i)
	}
	if err := os.WriteFile(keys, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ config, file string }{{cfg, baselines}, {keys, keys}} {
		cmd := exec.Command(binary, "check-config", "--config.file="+c.config)
		out, _ := cmd.CombinedOutput()
		rss := maxRSS(cmd)
		t.Logf("check-config %s: exit %d, %d bytes of output, max RSS %d MiB", filepath.Base(c.config), cmd.ProcessState.ExitCode(), len(out), rss>>20)
		if cmd.ProcessState.ExitCode() == 0 {
			t.Errorf("check-config accepted %s", c.config)
		}
		if !strings.Contains(string(out), c.file) || !strings.Contains(string(out), "too large") {
			t.Errorf("check-config on %s does not name %s and its size: %.300s", c.config, c.file, out)
		}
		if len(out) > 16<<10 {
			t.Errorf("check-config printed %d bytes", len(out))
		}
		if rss > 64<<20 {
			t.Errorf("check-config took %d MiB of RSS", rss>>20)
		}
	}

	d := startDaemon(t, "--config.file="+cfg, "--collector.disable-defaults")
	probetest.WaitUntil(t, "the baselines to be refused", 20*time.Second, func() bool {
		_, body := d.get("/status.json")
		return strings.Contains(body, baselines) && strings.Contains(body, "too large")
	})
	rss := vmHWM(t, d.cmd.Process.Pid)
	t.Logf("daemon peak RSS %d MiB after refusing the 100 MB baselines file", rss>>20)
	if rss > 64<<20 {
		t.Errorf("daemon peak RSS %d MiB after refusing a 100 MB baselines file", rss>>20)
	}
}

// vmHWM is a running process's peak resident set.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(s.Text(), "VmHWM: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// Clients holding idle keep-alive connections, past the daemon's file
// descriptor limit, must not make its probes fail (pipe2: too many open
// files): connections over half the limit are closed at once.
func TestHostileIdleConnectionsKeepProbesRunning(t *testing.T) {
	cfg, _ := writeConfig(t, `{name: s, kind: sequential, workers: 1, file_size: 1MiB, block_size: 256KiB, interval: 1s, timeout: 900ms}`)
	addr := probetest.FreeAddr(t)
	logs := &probetest.LogBuffer{}
	cmd := exec.Command("prlimit", "--nofile=96:96", "--", binary, "--web.listen-address="+addr, "--config.file="+cfg, "--collector.disable-defaults",
		"--slurm.cgroup-path="+t.TempDir(), "--slurm.spool-path="+t.TempDir(), "--log.level=debug")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%.20000s", logs.String())
		}
	}()
	probetest.WaitUntil(t, "the daemon to answer", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/-/healthy")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	// 200 connections, each having made a request and then idle.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 200; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /-/healthy HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	}
	// The exposure: the connections stay held for six probe slots (the
	// probe runs every second), not a wait for something to happen.
	time.Sleep(6 * time.Second)
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	var body string
	probetest.WaitUntil(t, "a scrape", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var sb strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
		body = sb.String()
		return true
	})
	if strings.Contains(logs.String(), "too many open files") {
		t.Errorf("the daemon ran out of descriptors while clients held connections")
	}
	if v := value(body, `plateau_probe_runs_total{kind="sequential",probe="s",result="failure"`); v > 0 {
		t.Errorf("%v probe runs failed while clients held connections", v)
	}
	if successes(body) < 3 {
		t.Errorf("only %v successful runs in the 6 s connections were held", successes(body))
	}
}

// Ctrl-C of `probe` mid-run stops the worker through its own SIGTERM
// path: the run's files are removed, none is left for a later sweep.
func TestHostileProbeInterruptLeavesNoFiles(t *testing.T) {
	cfg, target := writeConfig(t, `{name: md, kind: metadata, workers: 2, files: 200000, file_size: 0, interval: 1h, timeout: 10m}`)
	cmd := exec.Command(binary, "probe", "--config.file="+cfg, "--probe.hostname=n1")
	logs := &probetest.LogBuffer{}
	cmd.Stderr = logs
	cmd.WaitDelay = 5 * time.Second
	defer func() {
		if t.Failed() {
			t.Logf("probe's log:\n%s", logs.String())
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	probeDir := filepath.Join(target, "n1")
	probetest.WaitUntil(t, "the run to create files", 60*time.Second, func() bool {
		n := 0
		_ = filepath.WalkDir(probeDir, func(string, os.DirEntry, error) error { n++; return nil })
		return n > 1000
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("probe did not exit 40 s after Ctrl-C")
	}
	if left := probetest.HostProbeDirEntries(t, target, "n1"); len(left) != 0 {
		t.Errorf("Ctrl-C of probe left %v in the probe directory\n%s", left, logs.String())
	}
}
