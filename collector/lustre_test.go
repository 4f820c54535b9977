package collector

import (
	"path/filepath"
	"testing"
	"time"
)

// lustreTree is a fixture tree of one Lustre layout: root holds proc/ and
// sys/, as the daemon's --path.procfs and --path.sysfs see them, with
// debugfs at sys/kernel/debug, the flag's default.
func newTestLustre(t testing.TB, root string, timeout time.Duration) *lustreCollector {
	t.Helper()
	c, err := newLustreCollector(lustreConfig{
		procRoot:  filepath.Join(root, "proc", "fs", "lustre"),
		sysRoot:   filepath.Join(root, "sys", "fs", "lustre"),
		debugRoot: filepath.Join(root, "sys", "kernel", "debug", "lustre"),
		interval:  time.Hour,
		timeout:   timeout,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLustreLayouts reads the three layouts: 2.10 with everything in
// /proc/fs/lustre, 2.12 with the attributes in sysfs and llite stats in
// debugfs, 2.15 (the golden tree) with rpc_stats in debugfs too.
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
			c.mu.Lock()
			bad := c.last.badLines
			c.mu.Unlock()
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
