//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/faultfs"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// Helpers for the reliability and security tests that run the real
// plateau_exporter daemon against FUSE file systems and hostile probe
// directories, and watch it from outside: over HTTP, in /proc, and in the
// backing directories, never through the file system under test.

// hostname is the --probe.hostname of every daemon here, so the probe
// directory of a target path P is P/node1.
const hostname = "node1"

// waitLimit bounds every wait for a state the daemon must reach; it is
// generous because a loaded 2-core machine can be slow, and the tests
// assert that the state comes, not how fast.
const waitLimit = 90 * time.Second

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (mounts, chown to another user); run `make integration` as root (euid is %d)", os.Geteuid())
	}
}

// requireFUSE fails the test, naming what is missing, unless this process
// can mount a FUSE file system.
func requireFUSE(t *testing.T) {
	t.Helper()
	if err := faultfs.Check(); err != nil {
		t.Fatal(err)
	}
}

// closeFUSEOnExec marks this process's /dev/fuse descriptors close-on-exec.
// go-fuse (v2.12.1, mountDirect) opens /dev/fuse without O_CLOEXEC, so every
// process a test starts after mounting, the daemon and its workers, would
// inherit the FUSE connection: it would count in their descriptors, and a
// worker stuck on the connection would itself keep the connection open if
// this process died, and so never be released. Call it after each mount.
func closeFUSEOnExec(t *testing.T) {
	t.Helper()
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("list own descriptors: %v", err)
	}
	for _, de := range des {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", de.Name()))
		if err != nil || target != "/dev/fuse" {
			continue
		}
		fd, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // closed since the listing
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			t.Fatalf("mark /dev/fuse descriptor %d close-on-exec: %v", fd, err)
		}
	}
}

// mountFault mounts a faultfs for t, as faultfs.MountForTest does, and
// keeps its FUSE descriptor out of the processes the test starts.
func mountFault(t *testing.T, opts faultfs.Options) *faultfs.FS {
	t.Helper()
	f := faultfs.MountForTest(t, "", "", opts)
	closeFUSEOnExec(t)
	return f
}

// buildDaemon builds cmd/plateau_exporter into t's temporary directory.
// Each top-level test builds once and shares the binary with its subtests;
// Go's build cache makes all but the first build a link.
func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "plateau_exporter")
	build := exec.Command("go", "build", "-o", bin, "github.com/plateau-exporter/plateau_exporter/cmd/plateau_exporter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build plateau_exporter: %v\n%s", err, out)
	}
	return bin
}

// faultDaemon is a running plateau_exporter.
type faultDaemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	log    *probetest.LogBuffer
	done   chan struct{}
	client *http.Client
}

// startFaultDaemon runs bin with the config file and waits until it answers
// /-/healthy. Its cleanup stops it with SIGTERM (SIGKILL after 15s) and
// prints its log if the test failed; register mounts before calling it, so
// the daemon is gone before they are unmounted.
func startFaultDaemon(t *testing.T, bin, config string) *faultDaemon {
	t.Helper()
	d := startFaultDaemonNoWait(t, bin, config, probetest.FreeAddr(t))
	waitFor(t, "the daemon to answer /-/healthy", func() bool {
		failIfExited(t, d.done, d.log)
		resp, err := d.client.Get(d.url + "/-/healthy")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return d
}

// startFaultDaemonNoWait starts the daemon on addr and returns at once.
func startFaultDaemonNoWait(t *testing.T, bin, config, addr string) *faultDaemon {
	t.Helper()
	d := &faultDaemon{
		t: t, url: "http://" + addr, log: &probetest.LogBuffer{}, done: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second},
	}
	d.cmd = exec.Command(bin, "--web.listen-address="+addr, "--config.file="+config,
		"--probe.hostname="+hostname, "--collector.disable-defaults", "--log.level=debug", "--web.enable-lifecycle")
	d.cmd.Stderr = d.log
	// If this test process dies without its cleanups (a panic, go test's
	// -timeout), the daemon must die too rather than probe on forever. The
	// parent-death signal fires when the thread that started the child
	// exits, so that thread stays locked to this goroutine until the
	// daemon is gone.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := d.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = d.cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	t.Cleanup(func() {
		d.stop()
		d.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("daemon log (pid %d):\n%s", d.cmd.Process.Pid, d.log.String())
		}
	})
	return d
}

func (d *faultDaemon) pid() int { return d.cmd.Process.Pid }

// stop ends the daemon with SIGTERM, or SIGKILL when it does not exit.
func (d *faultDaemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	// 25 s: a worker on a hung mount gets worker.DefaultStopGrace (10 s)
	// after SIGTERM and 5 s after SIGKILL, inside the unit's
	// TimeoutStopSec=30s.
	case <-time.After(25 * time.Second):
		d.t.Errorf("daemon did not exit 25s after SIGTERM; killing it")
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// exitsOnTERM sends the daemon SIGTERM and fails the test unless it exits
// within the unit's TimeoutStopSec, after which systemd would SIGKILL it
// (and so does this); while names the situation for the messages.
func (d *faultDaemon) exitsOnTERM(t *testing.T, while string) {
	t.Helper()
	stopAt := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
		t.Logf("daemon exited %s after SIGTERM %s", time.Since(stopAt).Round(time.Millisecond), while)
	case <-time.After(timeoutStopSec):
		t.Errorf("daemon still running %s after SIGTERM %s (systemd would SIGKILL it now)", timeoutStopSec, while)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// scrape fetches /metrics and says how long it took.
func (d *faultDaemon) scrape() (metrics, time.Duration, error) {
	start := time.Now()
	resp, err := d.client.Get(d.url + "/metrics")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		return nil, took, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, took, fmt.Errorf("/metrics: HTTP %d: %.300s", resp.StatusCode, body)
	}
	return parseMetrics(string(body)), took, nil
}

func (d *faultDaemon) metrics() metrics {
	d.t.Helper()
	m, _, err := d.scrape()
	if err != nil {
		d.t.Fatal(err)
	}
	return m
}

func (d *faultDaemon) post(path string) (int, string, error) {
	resp, err := d.client.Post(d.url+path, "", nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// sample is one line of the text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type metrics []sample

var (
	exposedSample  = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
	faultLabelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseMetrics reads the text format the daemon serves to a plain GET.
func parseMetrics(text string) metrics {
	var out metrics
	for _, line := range strings.Split(text, "\n") {
		m := exposedSample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, lp := range faultLabelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[lp[1]] = lp[2]
		}
		out = append(out, s)
	}
	return out
}

// get returns the sum of the samples of name whose labels include every
// "key=value" given, and whether there was any.
func (m metrics) get(name string, match ...string) (float64, bool) {
	sum, found := 0.0, false
	for _, s := range m {
		if s.name != name || !s.matches(match) {
			continue
		}
		sum += s.value
		found = true
	}
	return sum, found
}

func (s sample) matches(match []string) bool {
	for _, kv := range match {
		k, v, _ := strings.Cut(kv, "=")
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// value is get for a series that must exist; it fails the test otherwise.
func (m metrics) value(t *testing.T, name string, match ...string) float64 {
	t.Helper()
	v, ok := m.get(name, match...)
	if !ok {
		t.Fatalf("no %s{%s} in /metrics", name, strings.Join(match, ","))
	}
	return v
}

// waitFor polls cond until it holds or waitLimit passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, what, waitLimit, cond)
}

func waitForWithin(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	probetest.WaitUntil(t, what, limit, cond)
}

// writeFaultConfig writes a daemon config file into a fresh directory.
func writeFaultConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plateau.yml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// oneTargetConfig writes a config of one target, name at path, whose only
// probe is the flow mapping probe; splay is off so that its first run
// starts at once.
func oneTargetConfig(t *testing.T, name, path, probe string) string {
	t.Helper()
	return writeFaultConfig(t, fmt.Sprintf("defaults:\n  splay: false\ntargets:\n  - name: %s\n    path: %s\n    probes:\n      - %s\n", name, path, probe))
}

// procStats is what the tests watch of a process in /proc.
type procStats struct {
	threads int
	fds     int
}

func statsOf(t *testing.T, pid int) procStats {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("daemon status: %v", err)
	}
	var st procStats
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			st.threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("daemon descriptors: %v", err)
	}
	st.fds = len(fds)
	return st
}

// fdTargets summarizes what a process's descriptors point at ("pipe" x3,
// "socket" x2, ...), to tell a leak from a busy moment.
func fdTargets(pid int) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	des, _ := os.ReadDir(dir)
	counts := map[string]int{}
	for _, de := range des {
		target, err := os.Readlink(filepath.Join(dir, de.Name()))
		if err != nil {
			continue
		}
		kind, _, _ := strings.Cut(target, ":")
		if strings.HasPrefix(kind, "/") {
			kind = "file"
		}
		counts[kind]++
	}
	kinds := make([]string, 0, len(counts))
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%s x%d", k, n))
	}
	sort.Strings(kinds)
	return strings.Join(kinds, ", ")
}

// children lists a process's children from /proc/<pid>/task/*/children
// that still hold anything: a zombie whose threads have all exited is left
// out, one whose leader exited while another thread is stuck is not.
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, task := range tasks {
		data, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(data)) {
			p, err := strconv.Atoi(f)
			if err == nil && procState(p) != "" && procState(p) != "Z" {
				pids = append(pids, p)
			}
		}
	}
	sort.Ints(pids)
	return pids
}

// procState is the state of a process for these tests: "D" when any of its
// threads is in uninterruptible sleep (the thread group leader of a Go
// process may already have exited, showing Z, while another thread is
// stuck), else the leader's one-letter state, or "" once it is gone.
func procState(pid int) string {
	leader := statState(fmt.Sprintf("/proc/%d/stat", pid))
	if leader == "" {
		return ""
	}
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	live := false
	for _, st := range stats {
		switch statState(st) {
		case "D":
			return "D"
		case "", "Z", "X":
		default:
			live = true
		}
	}
	if leader == "Z" && live {
		return "S"
	}
	return leader
}

// statState reads the state field of a /proc stat file. The command name
// in parentheses may hold spaces; the state follows the last ')'.
func statState(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// sigkillPending reports whether SIGKILL is pending for the process, i.e.
// it was sent and the process has not been able to act on it.
func sigkillPending(pid int) bool {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
			return true
		}
	}
	return false
}

// entries lists a directory's names, sorted; reading the backing directory
// of a FUSE mount this way never goes through the FUSE file system.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	names := make([]string, 0, len(des))
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// runDirs lists the run directories in a probe directory.
func runDirs(t *testing.T, probeDir string) []string {
	t.Helper()
	var out []string
	for _, n := range entries(t, probeDir) {
		if strings.HasPrefix(n, "run.") {
			out = append(out, n)
		}
	}
	return out
}

// sentinel is a file the daemon must never write, truncate or delete. Its
// mtime is set an hour back so that any write shows.
type sentinel struct {
	path    string
	content []byte
	mtime   time.Time
}

func newSentinel(t *testing.T, path string, content []byte) *sentinel {
	t.Helper()
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return &sentinel{path: path, content: content, mtime: old}
}

// check reports any change to the sentinel's content or mtime.
func (s *sentinel) check(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(s.path)
	if err != nil {
		t.Errorf("file outside the probe directory %s: %v", s.path, err)
		return
	}
	if !bytes.Equal(data, s.content) {
		t.Errorf("file outside the probe directory %s was written: %d bytes, first differing at %d", s.path, len(data), firstDiff(data, s.content))
	}
	var st unix.Stat_t
	if err := unix.Stat(s.path, &st); err != nil {
		t.Errorf("stat %s: %v", s.path, err)
		return
	}
	if mtime := time.Unix(st.Mtim.Unix()); !mtime.Equal(s.mtime) {
		t.Errorf("file outside the probe directory %s was modified at %s (was %s)", s.path, mtime, s.mtime)
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// wedgedFS is a FUSE loopback whose root can be wedged: while wedged, its
// root's lookup, getattr and opendir requests block and, unlike faultfs's
// Hang, ignore the kernel's FUSE_INTERRUPT, as a file system server that
// has stopped making progress does. The kernel then waits for the reply
// without a timeout even after SIGKILL (fs/fuse/dev.c request_wait_answer
// waits uninterruptibly once a request was handed to the server), so a
// caller stays in state D: the truly stuck worker of the design.
type wedgedFS struct {
	backing string
	mnt     string
	server  *fuse.Server

	mu      sync.Mutex
	wedged  bool
	release chan struct{}
	waiting int
}

// wedgedRoot is the root node; children are plain loopback nodes, so only
// the first step of any path walk, which every probe run makes, can block.
type wedgedRoot struct {
	*fs.LoopbackNode
	w *wedgedFS
}

// The bridge finds operations by type assertion; these are the ones the
// root gates.
var (
	_ fs.NodeLookuper       = (*wedgedRoot)(nil)
	_ fs.NodeGetattrer      = (*wedgedRoot)(nil)
	_ fs.NodeOpendirHandler = (*wedgedRoot)(nil)
)

func (r *wedgedRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	r.w.pass()
	return r.LoopbackNode.Lookup(ctx, name, out)
}

func (r *wedgedRoot) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r.w.pass()
	return r.LoopbackNode.Getattr(ctx, f, out)
}

func (r *wedgedRoot) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	r.w.pass()
	return r.LoopbackNode.OpendirHandle(ctx, flags)
}

// pass returns at once unless the FS is wedged; then it waits for Release,
// deliberately deaf to the request's context, which go-fuse cancels when
// the kernel sends FUSE_INTERRUPT.
func (w *wedgedFS) pass() {
	w.mu.Lock()
	if !w.wedged {
		w.mu.Unlock()
		return
	}
	release := w.release
	w.waiting++
	w.mu.Unlock()
	<-release
	w.mu.Lock()
	w.waiting--
	w.mu.Unlock()
}

// Wedge makes the root's requests block until Release.
func (w *wedgedFS) Wedge() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.wedged {
		w.wedged = true
		w.release = make(chan struct{})
	}
}

// Release answers every blocked request and lets new ones through.
func (w *wedgedFS) Release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wedged {
		w.wedged = false
		close(w.release)
	}
}

// Waiting is the number of requests blocked right now.
func (w *wedgedFS) Waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting
}

// mountWedged serves a fresh backing directory at a fresh mount point. Its
// cleanup releases every blocked request first, so stuck callers can die,
// then unmounts (lazily if a caller still holds the mount).
func mountWedged(t *testing.T) *wedgedFS {
	t.Helper()
	requireFUSE(t)
	w := &wedgedFS{backing: t.TempDir(), mnt: t.TempDir()}
	var st syscall.Stat_t
	if err := syscall.Stat(w.backing, &st); err != nil {
		t.Fatal(err)
	}
	root := &wedgedRoot{LoopbackNode: &fs.LoopbackNode{RootData: &fs.LoopbackRoot{Path: w.backing, Dev: st.Dev}}, w: w}
	root.RootData.RootNode = root
	// Zero cache timeouts, so every path walk asks the server and meets
	// the wedge, as faultfs does for its modes.
	var zero time.Duration
	server, err := fs.Mount(w.mnt, root, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			AllowOther: true, Options: []string{"default_permissions"},
			FsName: w.backing, Name: "wedged", DirectMount: true, DirectMountStrict: true,
		},
	})
	if err != nil {
		t.Fatalf("mount wedged FUSE file system on %s: %v", w.mnt, err)
	}
	w.server = server
	closeFUSEOnExec(t)
	t.Cleanup(func() {
		w.Release()
		var err error
		for i := 0; i < 50; i++ {
			if err = server.Unmount(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		if derr := unix.Unmount(w.mnt, unix.MNT_DETACH); derr != nil {
			t.Errorf("unmount %s: %v; detach: %v", w.mnt, err, derr)
		}
	})
	return w
}
