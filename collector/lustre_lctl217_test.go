package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
)

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
