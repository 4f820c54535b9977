package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// outsideFile is a file the daemon must never touch; it returns a check.
func outsideFile(t *testing.T) (string, func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(path, []byte("precious data"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil || string(data) != "precious data" {
			t.Errorf("outside file changed: %q, %v", data, err)
		}
		if fi, err := os.Stat(path); err != nil || !fi.ModTime().Equal(old) {
			t.Errorf("outside file touched: %v, %v", fi.ModTime(), err)
		}
	}
}

func TestProbeDirSymlinkRefused(t *testing.T) {
	target := t.TempDir()
	outside, check := outsideFile(t)
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(target, "node1")); err != nil {
		t.Fatal(err)
	}
	res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s")))
	if res.Reason != probe.ReasonUnsafe || !strings.Contains(res.Error, "symlink") {
		t.Fatalf("want unsafe/symlink, got %q: %s", res.Reason, res.Error)
	}
	check()
	entries, _ := os.ReadDir(filepath.Dir(outside))
	if len(entries) != 1 {
		t.Errorf("probe wrote into the symlinked directory: %v", entries)
	}
}

func TestWorldWritableParentWithoutStickyRefused(t *testing.T) {
	target := t.TempDir()
	if err := os.Chmod(target, 0o777); err != nil {
		t.Fatal(err)
	}
	res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s")))
	if res.Reason != probe.ReasonUnsafe || !strings.Contains(res.Error, "sticky") {
		t.Fatalf("want unsafe/sticky, got %q: %s", res.Reason, res.Error)
	}
	if _, err := os.Lstat(filepath.Join(target, "node1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("probe directory created under an unsafe parent: %v", err)
	}
	if err := os.Chmod(target, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s"))); !res.OK() {
		t.Fatalf("sticky world-writable parent (like /tmp) refused: %s", res.Error)
	}
}

func TestGroupWritableProbeDirRefused(t *testing.T) {
	target := t.TempDir()
	if err := os.Mkdir(filepath.Join(target, "node1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(target, "node1"), 0o770); err != nil {
		t.Fatal(err)
	}
	res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s")))
	if res.Reason != probe.ReasonUnsafe || !strings.Contains(res.Error, "writable by group") {
		t.Fatalf("want unsafe/group-writable, got %q: %s", res.Reason, res.Error)
	}
}

func TestSweepRemovesOnlyGeneratedNames(t *testing.T) {
	target := t.TempDir()
	outside, check := outsideFile(t)
	pd := filepath.Join(target, "node1")
	killed := filepath.Join(pd, "run.s.4242.1700000000000000000")
	mustMkdirAll(t, filepath.Join(killed, "d0"))
	mustWrite(t, filepath.Join(killed, "w0.dat"), "leftover")
	mustWrite(t, filepath.Join(killed, "d0", "f7"), "leftover")
	// A planted symlink with a generated name must be unlinked, not followed.
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(killed, "d1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(killed, "w1.dat")); err != nil {
		t.Fatal(err)
	}
	// A run directory holding a name we never generate is left alone.
	foreign := filepath.Join(pd, "run.s.4243.1700000000000000001")
	mustMkdirAll(t, foreign)
	mustWrite(t, filepath.Join(foreign, "notes.txt"), "someone else's")
	// Names that are not run directories are never swept.
	mustWrite(t, filepath.Join(pd, "README"), "keep")

	res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s")))
	if res.Reason != probe.ReasonOther || !strings.Contains(res.Error, "notes.txt was not created by plateau_exporter") {
		t.Fatalf("want the foreign file reported, got %q: %s", res.Reason, res.Error)
	}
	if _, err := os.Lstat(killed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("killed run's directory not swept: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(foreign, "notes.txt")); err != nil || string(data) != "someone else's" {
		t.Errorf("foreign file touched: %q %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(pd, "README")); err != nil {
		t.Errorf("non-run file removed: %v", err)
	}
	check()
}

func TestTargetLockSkipsSecondRun(t *testing.T) {
	target := t.TempDir()
	dir, err := openProbeDir(target, "node1", false)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	unlock, err := dir.lock()
	if err != nil {
		t.Fatal(err)
	}
	res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s")))
	if res.Skipped != probe.SkipTargetBusy {
		t.Fatalf("want skipped=target_busy while the lock is held, got %+v", res)
	}
	unlock()
	if res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s"))); !res.OK() {
		t.Fatalf("run after unlock failed: %s", res.Error)
	}
}

func mustMkdirAll(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
