package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// lustreTree is a fixture tree of one Lustre layout: root holds proc/ and
// sys/, as the daemon's --path.procfs and --path.sysfs see them, with
// debugfs at sys/kernel/debug, the flag's default.
func newTestLustre(t testing.TB, root string, timeout time.Duration) *lustreCollector {
	t.Helper()
	return startTestLustre(t, testLustreConfig(root, timeout))
}

// testLustreConfig is the configuration newTestLustre reads root with.
func testLustreConfig(root string, timeout time.Duration) lustreConfig {
	return lustreConfig{
		procRoot:  filepath.Join(root, "proc", "fs", "lustre"),
		sysRoot:   filepath.Join(root, "sys", "fs", "lustre"),
		debugRoot: filepath.Join(root, "sys", "kernel", "debug", "lustre"),
		interval:  time.Hour,
		timeout:   timeout,
	}
}

// startTestLustre builds the collector of cfg, closed when the test ends.
func startTestLustre(t testing.TB, cfg lustreConfig) *lustreCollector {
	t.Helper()
	c, err := newLustreCollector(cfg, nil)
	return closedAtEnd(t, c, err)
}

// TestLustreLayouts reads the three layouts: 2.10 with everything in
// /proc/fs/lustre, 2.12 with the attributes in sysfs and llite stats in
// debugfs, 2.15 (the golden tree) the same (rpc_stats stays in procfs
// through 2.16).
func TestLustreLayouts(t *testing.T) {
	for _, tc := range []struct{ version, root string }{
		{"2.10", fixturePath(t, "lustre", "2.10")},
		{"2.12", fixturePath(t, "lustre", "2.12")},
		{"2.15", fixturePath(t)},
	} {
		t.Run(tc.version, func(t *testing.T) {
			c := newTestLustre(t, tc.root, 5*time.Second)
			file := fixturePath(t, "expected", "lustre-"+tc.version+".prom")
			compareWithFile(t, newTestRegistry("lustre", c, nil), file, metricNames(t, file)...)
			last, _ := c.rounds.latest()
			bad := last.badLines
			for src, n := range bad {
				if n != 0 {
					t.Errorf("%d bad lines in the %s files of a real layout", n, src)
				}
			}
		})
	}
}

func TestLustreNoTree(t *testing.T) {
	c := newTestLustre(t, t.TempDir(), time.Second)
	if _, err := collectAll(c); !IsNoDataError(err) {
		t.Fatalf("no Lustre tree: err %v, want ErrNoData", err)
	}
}

// genLustre writes a 2.15 client of one file system, "scratch", with osts
// OSTs and one MDT under root (proc/ and sys/), from the 2.15 fixture's
// OST0000 and MDT0000 files with the device names changed; it returns the
// OST device names.
func genLustre(t testing.TB, root string, osts int) []string {
	t.Helper()
	const fixtureDev = "scratch-OST0000-osc-ffff8f2a3b4c5000"
	proc, sys := filepath.Join(root, "proc", "fs", "lustre"), filepath.Join(root, "sys", "fs", "lustre")
	debug := filepath.Join(root, "sys", "kernel", "debug", "lustre")
	copyAs := func(from, to string, replace ...string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		benchWrite(t, to, strings.TrimSuffix(strings.NewReplacer(replace...).Replace(string(data)), "\n"))
	}
	fixProc, fixSys := fixturePath(t, "proc", "fs", "lustre"), fixturePath(t, "sys", "fs", "lustre")
	fixDebug := fixturePath(t, "sys", "kernel", "debug", "lustre")
	var devs []string
	for i := 0; i < osts; i++ {
		name := fmt.Sprintf("OST%04x", i)
		dev := "scratch-" + name + "-osc-ffff8f2a3b4c5000"
		devs = append(devs, dev)
		r := []string{"OST0000", name}
		for _, f := range []string{"import", "state", "cur_grant_bytes"} {
			copyAs(filepath.Join(fixProc, "osc", fixtureDev, f), filepath.Join(proc, "osc", dev, f), r...)
		}
		for _, f := range []string{"active", "cur_dirty_bytes", "max_rpcs_in_flight"} {
			copyAs(filepath.Join(fixSys, "osc", fixtureDev, f), filepath.Join(sys, "osc", dev, f), r...)
		}
		copyAs(filepath.Join(fixProc, "osc", fixtureDev, "rpc_stats"), filepath.Join(proc, "osc", dev, "rpc_stats"), r...)
	}
	const mdc = "scratch-MDT0000-mdc-ffff8f2a3b4c5000"
	copyAs(filepath.Join(fixProc, "mdc", mdc, "import"), filepath.Join(proc, "mdc", mdc, "import"))
	copyAs(filepath.Join(fixProc, "mdc", mdc, "state"), filepath.Join(proc, "mdc", mdc, "state"))
	copyAs(filepath.Join(fixSys, "mdc", mdc, "active"), filepath.Join(sys, "mdc", mdc, "active"))
	const llite = "scratch-ffff8f2a3b4c5000"
	copyAs(filepath.Join(fixDebug, "llite", llite, "stats"), filepath.Join(debug, "llite", llite, "stats"))
	copyAs(filepath.Join(fixSys, "health_check"), filepath.Join(sys, "health_check"))
	return devs
}

// TestLustreSeriesPerOST holds a large site's client, 512 OSTs, to at most
// ten series per OST.
func TestLustreSeriesPerOST(t *testing.T) {
	root := t.TempDir()
	genLustre(t, root, 512)
	c := newTestLustre(t, root, 30*time.Second)
	perOST := map[string]int{}
	other := 0
	for _, s := range gatherSeries(t, newTestRegistry("lustre", c, nil)) {
		if target := s.labels["lustre_target"]; strings.HasPrefix(target, "OST") {
			perOST[target]++
		} else {
			other++
		}
	}
	if len(perOST) != 512 {
		t.Fatalf("%d OSTs exported, want 512", len(perOST))
	}
	for ost, n := range perOST {
		if n > 10 {
			t.Errorf("%s: %d series, want at most 10", ost, n)
		}
	}
	if n := perOST["OST01ff"]; n != 10 {
		t.Errorf("OST01ff: %d series, want all 10", n)
	}
	t.Logf("512 OSTs: %d series per OST, %d others", perOST["OST0000"], other)
}

// TestLustreHungRead puts a FIFO that no one writes in place of one OST's
// import file: opening it blocks, as a read on an evicted client does. The
// scrape must return by the round's deadline with everything else, later
// rounds must neither wait for it nor start a second read of it, and once
// it returns nothing is left running.
func TestLustreHungRead(t *testing.T) {
	root := t.TempDir()
	devs := genLustre(t, root, 4)
	fifo := filepath.Join(root, "proc", "fs", "lustre", "osc", devs[2], "import")
	release := hungFIFO(t, fifo)
	const timeout = time.Second
	c := newTestLustre(t, root, timeout)
	reg := newTestRegistry("lustre", c, nil)
	stuckKey := "osc/" + devs[2] + "/import"
	running := func() []string { return runningKeys(&c.reads) }

	begin := time.Now()
	if n, err := testutil.GatherAndCount(reg, "plateau_lustre_target_connected"); err != nil || n != 4 {
		// 3 OSTs and the MDT: the hung OST has no import this round.
		t.Fatalf("first scrape: %d connected series (err %v), want 4", n, err)
	}
	for metric, want := range map[string]int{"plateau_lustre_healthy": 1, "plateau_lustre_read_bytes_total": 1, "plateau_lustre_stuck_reads": 1} {
		if n, err := testutil.GatherAndCount(reg, metric); err != nil || n != want {
			t.Errorf("first scrape: %d %s series (err %v), want %d: the blocked read cost more than its target", n, metric, err, want)
		}
	}
	// The client recovers: the import answers again.
	checkHungRead(t, hungRead{began: begin, reg: reg, timeout: timeout, fifo: fifo, stuckKey: stuckKey, release: release, running: running,
		stuckReads: func() float64 { return stuckReadsOf(t, c.round()) }, metric: "plateau_lustre_stuck_reads",
		recovered: "import:\n    state: FULL"})
}

func stuckReadsOf(t *testing.T, r *lustreRound) float64 {
	t.Helper()
	return gaugeIn(t, r.metrics, "plateau_lustre_stuck_reads")
}

// lustreHist builds a state history from "time STATE" steps, one second
// apart from start: hist(100, "CONNECTING", "FULL").
func lustreHist(start int64, states ...string) []lustreStateEntry {
	h := make([]lustreStateEntry, len(states))
	for i, s := range states {
		h[i] = lustreStateEntry{time: start + int64(i), state: s}
	}
	return h
}

// lustreRing is what the state file shows after entries: the last 16.
func lustreRing(entries []lustreStateEntry) []lustreStateEntry {
	return entries[max(0, len(entries)-16):]
}

// TestLustreStateHistory follows an import's state history across rounds
// through sequences that Lustre's own code writes (lustre/ptlrpc/import.c:
// ptlrpc_disconnect_and_idle_import, ptlrpc_disconnect_idle_interpret,
// ptlrpc_set_import_discon, ptlrpc_connect_interpret), each round being
// what the state file shows at a scrape.
func TestLustreStateHistory(t *testing.T) {
	const (
		C = "CONNECTING"
		F = "FULL"
		I = "IDLE"
		D = "DISCONN"
		E = "EVICTED"
		R = "RECOVER"
		N = "NEW"
	)
	mount := lustreHist(100, C, F)
	idle := lustreHist(200, C, I, C, F) // closed after osc_idle_timeout, reopened at the next RPC
	lost := lustreHist(300, D, C, D, C, F)
	evicted := lustreHist(400, D, C, E, R, F)
	cat := func(parts ...[]lustreStateEntry) []lustreStateEntry {
		var out []lustreStateEntry
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// manyIdle is 5 idle cycles (20 entries): the ring has wrapped.
	var manyIdle []lustreStateEntry
	for i := int64(0); i < 5; i++ {
		manyIdle = append(manyIdle, lustreHist(1000+10*i, C, I, C, F)...)
	}
	history := cat(mount, manyIdle, lost) // 27 entries in all
	for _, tc := range []struct {
		name                  string
		rounds                [][]lustreStateEntry
		reconnects, evictions uint64
	}{
		{"first connection", [][]lustreStateEntry{mount}, 0, 0},
		{"first connection in two attempts", [][]lustreStateEntry{lustreHist(100, C, D, C, F)}, 0, 0},
		{"first connection in two attempts, seen in two rounds", [][]lustreStateEntry{lustreHist(100, C, D), lustreHist(100, C, D, C, F)}, 0, 0},
		{"idle cycle", [][]lustreStateEntry{cat(mount, idle)}, 0, 0},
		{"idle cycle, then idle now", [][]lustreStateEntry{cat(mount, lustreHist(200, C, I))}, 0, 0},
		{"idle disconnect raced by a request (NEW)", [][]lustreStateEntry{cat(mount, lustreHist(200, C, N, C, F))}, 0, 0},
		{"idle cycle, then a real disconnect and reconnect", [][]lustreStateEntry{cat(mount, idle, lost)}, 1, 0},
		{"idle cycle and real loss in separate rounds", [][]lustreStateEntry{cat(mount, idle), cat(mount, idle, lost[:3]), cat(mount, idle, lost)}, 1, 0},
		{"woken from idle into an unreachable server", [][]lustreStateEntry{cat(mount, lustreHist(200, C, I, C, D, C, F))}, 1, 0},
		{"eviction", [][]lustreStateEntry{cat(mount, evicted)}, 1, 1},
		{"no idle (2.10): lost and back", [][]lustreStateEntry{cat(mount, lustreHist(300, D, C, R, F))}, 1, 0},
		{"unchanged rounds count nothing more", [][]lustreStateEntry{cat(mount, idle, lost), cat(mount, idle, lost), cat(mount, idle, lost)}, 1, 0},
		{"ring wrapped between two scrapes", [][]lustreStateEntry{lustreRing(history[:18]), lustreRing(history)}, 1, 0},
		{"ring wrapped, every round", [][]lustreStateEntry{
			lustreRing(history[:10]), lustreRing(history[:17]), lustreRing(history[:24]), lustreRing(history), lustreRing(history)}, 1, 0},
		{"ring wrapped, eviction in the new part", [][]lustreStateEntry{
			lustreRing(cat(mount, manyIdle)), lustreRing(cat(mount, manyIdle, evicted))}, 1, 1},
		{"first sight of a wrapped ring of idle cycles", [][]lustreStateEntry{lustreRing(manyIdle)}, 0, 0},
	} {
		var h lustreTargetHistory
		for _, r := range tc.rounds {
			h.count(r)
		}
		if h.reconnects != tc.reconnects || h.evictions != tc.evictions {
			t.Errorf("%s: %d reconnects and %d evictions, want %d and %d", tc.name, h.reconnects, h.evictions, tc.reconnects, tc.evictions)
		}
	}
}

// TestLustreBadValuesAndServerDevices: a value that does not parse costs
// its series and is counted; a server's own osc device is not a target of
// this client.
func TestLustreBadValuesAndServerDevices(t *testing.T) {
	root := t.TempDir()
	devs := genLustre(t, root, 2)
	benchWrite(t, filepath.Join(root, "sys", "fs", "lustre", "osc", devs[1], "active"), "yes")
	mds := filepath.Join(root, "proc", "fs", "lustre", "osc", "scratch-OST0000-osc-MDT0000")
	data, err := os.ReadFile(filepath.Join(root, "proc", "fs", "lustre", "osc", devs[0], "import"))
	if err != nil {
		t.Fatal(err)
	}
	benchWrite(t, filepath.Join(mds, "import"), string(data))
	c := newTestLustre(t, root, 5*time.Second)
	r := c.round()
	if r.badLines["param"] != 1 {
		t.Errorf("bad lines %v, want one in param", r.badLines)
	}
	reg := newTestRegistry("lustre", c, nil)
	for metric, want := range map[string]int{"plateau_lustre_target_connected": 3, "plateau_lustre_target_active": 2} {
		if n, err := testutil.GatherAndCount(reg, metric); err != nil || n != want {
			t.Errorf("%s: %d series (err %v), want %d", metric, n, err, want)
		}
	}
	// Each source has its series; the counts add up across rounds (the
	// direct round above and the scrape's first).
	want := `
# HELP plateau_collector_parse_errors_total Lines of the source that the collector could not read and skipped.
# TYPE plateau_collector_parse_errors_total counter
plateau_collector_parse_errors_total{collector="lustre",source="import"} 0
plateau_collector_parse_errors_total{collector="lustre",source="param"} 2
plateau_collector_parse_errors_total{collector="lustre",source="rpc_stats"} 0
plateau_collector_parse_errors_total{collector="lustre",source="state"} 0
plateau_collector_parse_errors_total{collector="lustre",source="stats"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_collector_parse_errors_total"); err != nil {
		t.Error(err)
	}
}

// lctlOutput is what `lctl get_param osc.*.rpc_stats llite.*.stats` prints
// for a debugfs tree: each parameter's name and '=' on a line of its own,
// then its value.
func lctlOutput(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range []struct{ dir, kind, file string }{
		{filepath.Join(root, "proc", "fs", "lustre"), "osc", "rpc_stats"},
		{filepath.Join(root, "sys", "kernel", "debug", "lustre"), "llite", "stats"},
	} {
		entries, err := os.ReadDir(filepath.Join(p.dir, p.kind))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(p.dir, p.kind, e.Name(), p.file))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s.%s.%s=\n%s", p.kind, e.Name(), p.file, data)
		}
	}
	return b.String()
}

// fakeLctl writes an lctl that checks its command line is the one the
// sudoers file allows, then runs body.
func fakeLctl(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lctl")
	script := "#!/bin/sh\n" +
		`[ "$*" = "` + strings.Join(lustreLctlArgs(), " ") + `" ] || { echo "unexpected arguments: $*" >&2; exit 2; }` + "\n" + body + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLustreLctl: in sudo mode rpc_stats and llite stats come from one lctl
// run and give the series the direct reads give, with debugfs unreadable.
func TestLustreLctl(t *testing.T) {
	root := fixturePath(t)
	out := filepath.Join(t.TempDir(), "lctl.out")
	benchWrite(t, out, lctlOutput(t, fixturePath(t)))
	cfg := testLustreConfig(root, 5*time.Second)
	cfg.debugRoot = filepath.Join(t.TempDir(), "unreadable")
	// lctl exits 1 when a pattern matches nothing, saying so on stderr;
	// what it printed is still read.
	cfg.lctlPath = fakeLctl(t, "cat "+out+"; echo \"error: get_param: param_path 'llite/*/stats': No such file or directory\" >&2; exit 1")
	c := startTestLustre(t, cfg)
	file := fixturePath(t, "expected", "lustre-2.15.prom")
	compareWithFile(t, newTestRegistry("lustre", c, nil), file, metricNames(t, file)...)
	last, _ := c.rounds.latest()
	bad := last.badLines
	for _, src := range []string{lustreSourceLctl, lustreSourceRPCStats, lustreSourceStats} {
		if bad[src] != 0 {
			t.Errorf("%d bad lines in %s read through lctl", bad[src], src)
		}
	}
}

// TestLustreLctlHung: an lctl that does not return costs only its own
// series; its process group is killed at the round's deadline.
func TestLustreLctlHung(t *testing.T) {
	root := t.TempDir()
	genLustre(t, root, 4)
	pidFile := filepath.Join(t.TempDir(), "pid")
	const timeout = time.Second
	cfg := testLustreConfig(root, timeout)
	// The child sleep is what must not be left behind.
	cfg.lctlPath = fakeLctl(t, "sleep 60 & echo $! > "+pidFile+"; wait")
	c := startTestLustre(t, cfg)
	begin := time.Now()
	r := c.round()
	if d := time.Since(begin); d > timeout+time.Second {
		t.Errorf("round took %s, want the deadline (%s) at most", d, timeout)
	}
	if got := stuckReadsOf(t, r); got != 1 {
		t.Errorf("plateau_lustre_stuck_reads %v, want 1 (lctl)", got)
	}
	c.rounds.startOnce.Do(func() {}) // the test runs the round itself
	c.rounds.publish(r)
	reg := newTestRegistry("lustre", c, nil)
	for metric, want := range map[string]int{"plateau_lustre_target_connected": 5, "plateau_lustre_healthy": 1,
		"plateau_lustre_read_bytes_total": 0, "plateau_lustre_rpcs_total": 0} {
		if n, err := testutil.GatherAndCount(reg, metric); err != nil || n != want {
			t.Errorf("%s: %d series (err %v), want %d", metric, n, err, want)
		}
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(data), &pid); err != nil {
		t.Fatal(err)
	}
	probetest.WaitUntil(t, "lctl's child to be killed", 5*time.Second, func() bool {
		return unix.Kill(pid, 0) == unix.ESRCH
	})
}

func TestParseLctlGetParam(t *testing.T) {
	params, bad := parseLctlGetParam([]byte("junk\n" +
		"osc.scratch-OST0000-osc-ffff8f2a3b4c5000.rpc_stats=\nsnapshot_time: 1.5 (secs.nsecs)\nread RPCs in flight:  0\n" +
		"llite.scratch-ffff8f2a3b4c5000.stats=snapshot_time 1.5 secs.nsecs\n" +
		"llite.home-ffff8f2a3b4c6800.stats=\nopen 3 samples [usecs]\n"))
	want := map[string]string{
		"osc.scratch-OST0000-osc-ffff8f2a3b4c5000.rpc_stats": "snapshot_time: 1.5 (secs.nsecs)\nread RPCs in flight:  0\n",
		"llite.scratch-ffff8f2a3b4c5000.stats":               "snapshot_time 1.5 secs.nsecs\n",
		"llite.home-ffff8f2a3b4c6800.stats":                  "open 3 samples [usecs]\n",
	}
	if bad != 1 || len(params) != len(want) {
		t.Fatalf("%d bad lines, params %q; want 1 and %q", bad, params, want)
	}
	for k, v := range want {
		if string(params[k]) != v {
			t.Errorf("%s = %q, want %q", k, params[k], v)
		}
	}
}

// FuzzParseLctlGetParam: whatever the values hold, short of a line that
// names one of the parameters asked for, each comes back whole under its
// name, and nothing is bad.
func FuzzParseLctlGetParam(f *testing.F) {
	for _, p := range []string{"proc/fs/lustre/osc/scratch-OST0000-osc-ffff8f2a3b4c5000/rpc_stats", "sys/kernel/debug/lustre/llite/scratch-ffff8f2a3b4c5000/stats"} {
		data, err := os.ReadFile(fixturePath(f, strings.Split(p, "/")...))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data), "open 3 samples [usecs]\n")
	}
	f.Fuzz(func(t *testing.T, rpc, stats string) {
		norm := func(v string) string {
			var lines []string
			for _, l := range splitLines([]byte(strings.ReplaceAll(v, "\r", ""))) {
				if lustreLctlHeader.MatchString(l) {
					t.Skip("a value line that reads as a parameter name")
				}
				lines = append(lines, l+"\n")
			}
			return strings.Join(lines, "")
		}
		rpc, stats = norm(rpc), norm(stats)
		const osc, llite = "osc.scratch-OST0000-osc-ffff8f2a3b4c5000.rpc_stats", "llite.scratch-ffff8f2a3b4c5000.stats"
		params, bad := parseLctlGetParam([]byte(osc + "=\n" + rpc + llite + "=\n" + stats))
		if bad != 0 || string(params[osc]) != rpc || string(params[llite]) != stats {
			t.Fatalf("%d bad lines, params %q; want 0 and %q, %q", bad, params, rpc, stats)
		}
	})
}

// lustre217Tree lays the 2.16 client fixture out as 2.17 does: the osc and
// mdc import, state and rpc_stats files leave procfs for debugfs (the
// LDEBUGFS_SEQ_FOPS of lustre/osc/lproc_osc.c and lustre/mdc/lproc_mdc.c,
// v2_17_0), llite stats stay in debugfs, the single values in sysfs. It
// returns the tree's root and what each of the collector's two lctl
// command lines prints for it.
func lustre217Tree(t *testing.T) (root, counters, imports string) {
	t.Helper()
	src := fixturePath(t, "lustre", "2.16")
	root = t.TempDir()
	var c, i strings.Builder
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		parts := strings.Split(rel, string(filepath.Separator))
		name := parts[len(parts)-1]
		if parts[0] == "proc" && (name == "import" || name == "state" || name == "rpc_stats") {
			// kind/device/file: in debugfs now, which only lctl reads.
			kind, dev := parts[len(parts)-3], parts[len(parts)-2]
			w := &i
			if name == "rpc_stats" {
				w = &c
			}
			fmt.Fprintf(w, "%s.%s.%s=\n%s", kind, dev, name, data)
			return nil
		}
		if name == "stats" && strings.Contains(rel, "llite") {
			fmt.Fprintf(&c, "llite.%s.stats=\n%s", parts[len(parts)-2], data)
		}
		dst := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, c.String(), i.String()
}

// fakeLctl2 writes an lctl that answers the collector's two command lines
// with counters and imports, logs each command line to log, and refuses
// any other line as the sudoers file does.
func fakeLctl2(t *testing.T, counters, imports, log string) string {
	t.Helper()
	dir := t.TempDir()
	benchWrite(t, filepath.Join(dir, "counters"), counters)
	benchWrite(t, filepath.Join(dir, "imports"), imports)
	path := filepath.Join(dir, "lctl")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\ncase \"$*\" in\n" +
		`"` + strings.Join(lustreLctlArgs(), " ") + `") exec cat ` + filepath.Join(dir, "counters") + " ;;\n" +
		`"` + strings.Join(lustreLctlImportArgs(), " ") + `") exec cat ` + filepath.Join(dir, "imports") + " ;;\n" +
		"*) echo \"unexpected arguments: $*\" >&2; exit 2 ;;\nesac\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// lustreSeries gathers the plateau_lustre_* families of a collector as
// text, for comparing two collectors' answers.
func lustreSeries(t *testing.T, c Collector) string {
	t.Helper()
	mfs, err := newTestRegistry("lustre", c, nil).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "plateau_lustre_") {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

// TestLustreLctl217: with --collector.lustre.sudo on 2.17, where the
// imports and state histories are in debugfs, a daemon that cannot read
// debugfs gets every series the 2.16 layout gives it directly, the imports
// through the second lctl line; on 2.16 that line is never run.
func TestLustreLctl217(t *testing.T) {
	direct := func(root string) lustreConfig {
		return lustreConfig{
			procRoot:  filepath.Join(root, "proc", "fs", "lustre"),
			sysRoot:   filepath.Join(root, "sys", "fs", "lustre"),
			debugRoot: filepath.Join(root, "sys", "kernel", "debug", "lustre"),
			interval:  time.Hour,
			timeout:   5 * time.Second,
		}
	}
	build := func(cfg lustreConfig) *lustreCollector {
		c, err := newLustreCollector(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	want := lustreSeries(t, build(direct(fixturePath(t, "lustre", "2.16"))))
	if !strings.Contains(want, "plateau_lustre_target_connected{") || !strings.Contains(want, "plateau_lustre_target_reconnects_total{") {
		t.Fatalf("the 2.16 tree gives no import or state series:\n%s", want)
	}

	root, counters, imports := lustre217Tree(t)
	log := filepath.Join(t.TempDir(), "log")
	cfg := direct(root)
	cfg.debugRoot = filepath.Join(t.TempDir(), "unreadable") // not root: debugfs is out of reach
	cfg.lctlPath = fakeLctl2(t, counters, imports, log)
	c := build(cfg)
	if got := lustreSeries(t, c); got != want {
		t.Errorf("2.17 through lctl:\n%s\nwant, as 2.16 read directly:\n%s", got, want)
	}
	last, _ := c.rounds.latest()
	for src, n := range last.badLines {
		if n != 0 {
			t.Errorf("%d bad lines in %s", n, src)
		}
	}
	if lines, _ := os.ReadFile(log); strings.Count(string(lines), "\n") != 2 {
		t.Errorf("lctl ran %q, want both lines once", lines)
	}

	// 2.16 in sudo mode: the imports are in procfs, read directly; only
	// the counters line runs.
	log16 := filepath.Join(t.TempDir(), "log")
	cfg = direct(fixturePath(t, "lustre", "2.16"))
	cfg.lctlPath = fakeLctl2(t, counters, imports, log16)
	lustreSeries(t, build(cfg))
	if lines, _ := os.ReadFile(log16); string(lines) != strings.Join(lustreLctlArgs(), " ")+"\n" {
		t.Errorf("on 2.16 lctl ran %q, want the counters line only", lines)
	}
}
