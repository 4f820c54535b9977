//go:build integration

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The daemon in hostile probe directories: scratch file systems where
// other users write, and where a symlink, a hard link or a foreign file may
// sit where the daemon expects its own. It runs as root here, the worst
// case: no permission check would stop it from following a planted link.
// Whatever it finds, it must refuse or skip with a clear error and never
// write, truncate or delete anything outside its own directory; files
// outside are checked by content and mtime.

// outsideDir is a directory the daemon must never change: its entries, its
// mtime and its files' content and mtimes. Its files carry names the
// probes generate, so a daemon that followed a link into it and cleaned
// up "its" files would show.
type outsideDir struct {
	path      string
	names     []string
	mtime     time.Time
	sentinels []*sentinel
}

func newOutsideDir(t *testing.T) *outsideDir {
	t.Helper()
	o := &outsideDir{path: t.TempDir()}
	for _, n := range []string{"precious", "w0.dat", "shared.dat", "random.dat", "f0", "f00000000000000000", "d0"} {
		o.sentinels = append(o.sentinels, newSentinel(t, filepath.Join(o.path, n), []byte("outside data: "+n)))
	}
	o.seal(t)
	return o
}

// add puts one more sentinel in the directory.
func (o *outsideDir) add(t *testing.T, name string, content []byte) *sentinel {
	t.Helper()
	s := newSentinel(t, filepath.Join(o.path, name), content)
	o.sentinels = append(o.sentinels, s)
	o.seal(t)
	return s
}

// seal records the directory's entries and sets its mtime an hour back.
func (o *outsideDir) seal(t *testing.T) {
	t.Helper()
	o.names = entries(t, o.path)
	o.mtime = time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(o.path, o.mtime, o.mtime); err != nil {
		t.Fatal(err)
	}
}

func (o *outsideDir) file(name string) string { return filepath.Join(o.path, name) }

func (o *outsideDir) check(t *testing.T) {
	t.Helper()
	if got := entries(t, o.path); !slices.Equal(got, o.names) {
		t.Errorf("directory outside the probe directory %s changed: %v, was %v", o.path, got, o.names)
	}
	var st unix.Stat_t
	if err := unix.Stat(o.path, &st); err != nil {
		t.Fatal(err)
	}
	if mtime := time.Unix(st.Mtim.Unix()); !mtime.Equal(o.mtime) {
		t.Errorf("directory outside the probe directory %s was modified at %s", o.path, mtime)
	}
	for _, s := range o.sentinels {
		s.check(t)
	}
}

func mkdir(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Link(target, name); err != nil {
		t.Fatal(err)
	}
}

// logHas reports whether a daemon log line about the target contains want.
func logHas(log, target, want string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "target="+target+" ") && strings.Contains(line, want) {
			return true
		}
	}
	return false
}

const (
	// nobody owns the foreign probe directory.
	nobody = 65534
	// randomSize is the random probes' file_size: the hard link planted as
	// their kept file has exactly this size and the mode of a complete
	// file, so only its link count betrays it.
	randomSize = 1 << 20
	coldSize   = 256 << 10
)

func TestDaemonHostileProbeDirectories(t *testing.T) {
	requireRoot(t)
	bin := buildDaemon(t)
	out := newOutsideDir(t)
	root := t.TempDir()
	pd := func(target string) string { return filepath.Join(root, target, hostname) }

	// A probe directory owned by another user.
	mkdir(t, pd("foreign"), 0o700)
	if err := os.Chown(pd("foreign"), nobody, nobody); err != nil {
		t.Fatal(err)
	}
	foreignMtime := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(pd("foreign"), foreignMtime, foreignMtime); err != nil {
		t.Fatal(err)
	}
	// The probe directory is a symlink to a directory outside.
	mkdir(t, filepath.Join(root, "symlinked"), 0o755)
	symlink(t, out.path, pd("symlinked"))
	// The target path is world-writable without the sticky bit.
	mkdir(t, filepath.Join(root, "worldwritable"), 0o777)

	// Planted links inside a probe directory that is the daemon's own, at
	// every name the probes generate or reuse.
	mkdir(t, pd("planted"), 0o700)
	for _, n := range []string{"w0.dat", "shared.dat", "random.dat", "f0", "f00000000000000000", "d0"} {
		symlink(t, out.file(n), filepath.Join(pd("planted"), n))
	}
	// A run directory of a killed run, and the keep directory of a probe
	// no longer configured: both swept, and both symlinks into out.
	symlink(t, out.path, filepath.Join(pd("planted"), "run.seq.4242.1700000000000000000"))
	symlink(t, out.path, filepath.Join(pd("planted"), "keep.gone"))
	// The random probe's kept file as a symlink (the hard link is
	// TestDaemonHostileHardLinkedKeptFile's).
	mkdir(t, filepath.Join(pd("planted"), "keep.rand"), 0o700)
	symlink(t, out.file("random.dat"), filepath.Join(pd("planted"), "keep.rand", "random.dat"))
	// Kept generations of the cold-read probe: one file a symlink, one a
	// hard link of the right size.
	coldBig := out.add(t, "coldbig", pattern(coldSize))
	for i, n := range []string{"d1000000000000000000", "d1000000000000000001"} {
		mkdir(t, filepath.Join(pd("planted"), "keep.cold", n), 0o700)
		if i == 0 {
			symlink(t, out.file("w0.dat"), filepath.Join(pd("planted"), "keep.cold", n, "w0.dat"))
		} else {
			link(t, coldBig.path, filepath.Join(pd("planted"), "keep.cold", n, "w0.dat"))
		}
	}
	// A hard link in a killed run's directory.
	mkdir(t, filepath.Join(pd("planted"), "run.seq.4243.1700000000000000001"), 0o700)
	link(t, out.file("shared.dat"), filepath.Join(pd("planted"), "run.seq.4243.1700000000000000001", "w0.dat"))
	out.seal(t)

	// The keep directories of configured probes are symlinks out.
	mkdir(t, pd("keeplink"), 0o700)
	symlink(t, out.path, filepath.Join(pd("keeplink"), "keep.rand"))
	symlink(t, out.path, filepath.Join(pd("keeplink"), "keep.cold"))
	// Name collisions: a file where a keep directory goes, a directory
	// where the lock goes, a dangling symlink as the lock, and a run
	// directory holding a file the daemon never made.
	mkdir(t, pd("keepfile"), 0o700)
	keepFile := newSentinel(t, filepath.Join(pd("keepfile"), "keep.rand"), []byte("someone's notes"))
	mkdir(t, filepath.Join(pd("lockdir"), ".lock"), 0o700)
	lockDirFile := newSentinel(t, filepath.Join(pd("lockdir"), ".lock", "f0"), []byte("inside a directory named .lock"))
	mkdir(t, pd("locklink"), 0o700)
	notYet := out.file("created-through-lock")
	symlink(t, notYet, filepath.Join(pd("locklink"), ".lock"))
	foreignRun := filepath.Join(pd("runforeign"), "run.seq.4244.1700000000000000002")
	mkdir(t, foreignRun, 0o700)
	notes := newSentinel(t, filepath.Join(foreignRun, "notes.txt"), []byte("someone else's"))
	// A generated name beside it, which the sweep may remove: only the
	// foreign one must stay.
	if err := os.WriteFile(filepath.Join(foreignRun, "w0.dat"), []byte("leftover"), 0o600); err != nil {
		t.Fatal(err)
	}

	seq := "{name: seq, kind: sequential, workers: 1, file_size: 256KiB, block_size: 64KiB}"
	rnd := func(name string) string {
		return fmt.Sprintf("{name: %s, kind: random, file_size: %d, block_size: 4KiB, queue_depth: 4, duration: 200ms}", name, randomSize)
	}
	cold := fmt.Sprintf("{name: cold, kind: sequential, workers: 1, file_size: %d, block_size: 64KiB, read_after: 2s}", coldSize)
	target := func(name string, probes ...string) string {
		return fmt.Sprintf("  - name: %s\n    path: %s\n    probes:\n      - %s\n", name, filepath.Join(root, name), strings.Join(probes, "\n      - "))
	}
	cfg := writeFaultConfig(t, "defaults:\n  interval: 3s\n  timeout: 2500ms\ntargets:\n"+
		target("foreign", seq)+
		target("symlinked", seq)+
		target("worldwritable", seq)+
		target("planted", seq, cold, rnd("rand"),
			"{name: shared, kind: shared_file, workers: 2, block_size: 64KiB, segment_size: 256KiB}",
			"{name: md, kind: metadata, workers: 2, files: 16, file_size: 4KiB}")+
		target("keeplink", rnd("rand"), cold)+
		target("keepfile", rnd("rand"))+
		target("lockdir", seq)+
		target("locklink", seq)+
		target("runforeign", seq))
	d := startFaultDaemon(t, bin, cfg)

	refused := []struct {
		target, probe, reason, says string
	}{
		{"foreign", "seq", "unsafe", fmt.Sprintf("owned by uid %d", nobody)},
		{"symlinked", "seq", "unsafe", "is a symlink"},
		{"worldwritable", "seq", "unsafe", "without the sticky bit"},
		{"keeplink", "rand", "unsafe", "keep.rand is a symlink"},
		{"keeplink", "cold", "unsafe", "keep.cold is a symlink"},
		{"keepfile", "rand", "unsafe", "keep.rand is a symlink or not a directory"},
		{"lockdir", "seq", "other", ".lock"},
		{"locklink", "seq", "other", ".lock"},
		{"runforeign", "seq", "other", "notes.txt was not created by plateau_exporter"},
	}
	plantedProbes := []string{"seq", "cold", "rand", "shared", "md"}
	// Three runs of everything: the refused ones refused each time, the
	// planted target's probes run (and recover from what was planted).
	waitFor(t, "three runs of every probe", func() bool {
		m := d.metrics()
		for _, r := range refused {
			if v, _ := m.get("plateau_probe_errors_total", "target="+r.target, "probe="+r.probe, "reason="+r.reason); v < 3 {
				return false
			}
		}
		for _, p := range plantedProbes {
			ok, _ := m.get("plateau_probe_runs_total", "target=planted", "probe="+p, "result=success")
			bad, _ := m.get("plateau_probe_runs_total", "target=planted", "probe="+p, "result=failure")
			if ok < 1 || ok+bad < 3 {
				return false
			}
		}
		return true
	})
	m := d.metrics()
	log := d.log.String()
	for _, r := range refused {
		if v := m.value(t, "plateau_probe_success", "target="+r.target, "probe="+r.probe); v != 0 {
			t.Errorf("%s/%s: plateau_probe_success %v, want 0", r.target, r.probe, v)
		}
		if v := m.value(t, "plateau_probe_runs_total", "target="+r.target, "probe="+r.probe, "result=success"); v != 0 {
			t.Errorf("%s/%s: %v runs succeeded", r.target, r.probe, v)
		}
		if !logHas(log, r.target, r.says) {
			t.Errorf("%s/%s: no log line saying %q", r.target, r.probe, r.says)
		}
	}
	for _, p := range plantedProbes {
		if bad := m.value(t, "plateau_probe_runs_total", "target=planted", "probe="+p, "result=failure"); bad > 0 {
			t.Logf("planted/%s: %v failed runs before it recovered", p, bad)
		}
	}
	// Stopping may kill a run mid-way; nothing outside may change then either.
	d.stop()

	out.check(t)
	keepFile.check(t)
	lockDirFile.check(t)
	notes.check(t)
	if _, err := os.Lstat(notYet); !os.IsNotExist(err) {
		t.Errorf("the daemon created %s through a symlinked .lock (%v)", notYet, err)
	}
	if names := entries(t, pd("foreign")); len(names) != 0 {
		t.Errorf("the daemon wrote into a probe directory owned by uid %d: %v", nobody, names)
	}
	var st unix.Stat_t
	if err := unix.Lstat(pd("foreign"), &st); err != nil || st.Uid != nobody || time.Unix(st.Mtim.Unix()) != foreignMtime {
		t.Errorf("the foreign probe directory was changed: uid %d, mtime %s (%v)", st.Uid, time.Unix(st.Mtim.Unix()), err)
	}
	if _, err := os.Lstat(pd("worldwritable")); !os.IsNotExist(err) {
		t.Errorf("the daemon created its probe directory under a world-writable parent without the sticky bit (%v)", err)
	}
	for _, n := range []string{"keep.rand", "keep.cold"} {
		if fi, err := os.Lstat(filepath.Join(pd("keeplink"), n)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("keeplink/%s: the refused symlink was not left as found (%v)", n, err)
		}
	}
	// What was planted inside the daemon's own directory: links at its
	// top level are not its names and stay; swept names are unlinked, not
	// followed; kept files that were links are replaced by its own.
	for _, n := range []string{"w0.dat", "shared.dat", "random.dat", "f0", "f00000000000000000", "d0"} {
		if fi, err := os.Lstat(filepath.Join(pd("planted"), n)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("planted/%s: a name the daemon does not own at this level was removed or replaced (%v)", n, err)
		}
	}
	for _, n := range []string{"run.seq.4242.1700000000000000000", "run.seq.4243.1700000000000000001", "keep.gone"} {
		if _, err := os.Lstat(filepath.Join(pd("planted"), n)); !os.IsNotExist(err) {
			t.Errorf("planted/%s: a leftover the daemon should sweep is still there (%v)", n, err)
		}
	}
	checkOwnFile(t, filepath.Join(pd("planted"), "keep.rand", "random.dat"))
	if _, err := os.Stat(foreignRun); err != nil {
		t.Errorf("the run directory holding a foreign file was removed (%v)", err)
	}
}

// checkOwnFile wants a regular file with one link: the daemon's own.
func checkOwnFile(t *testing.T, path string) {
	t.Helper()
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		t.Errorf("%s: want the daemon's own regular file with one link, got mode %o, %d links (%v)", path, st.Mode, st.Nlink, err)
	}
}

// A hard link planted as the random probe's kept file, to a file outside
// with exactly the size and mode of a complete kept file, must not be
// reused: the probe writes into its kept file, which would write into the
// outside file. Only the link count tells the two apart.
func TestDaemonHostileHardLinkedKeptFile(t *testing.T) {
	requireRoot(t)
	bin := buildDaemon(t)
	out := newOutsideDir(t)
	root := t.TempDir()
	probeDir := filepath.Join(root, hostname)
	mkdir(t, filepath.Join(probeDir, "keep.rand"), 0o700)
	big := out.add(t, "big", pattern(randomSize))
	link(t, big.path, filepath.Join(probeDir, "keep.rand", "random.dat"))
	cfg := writeFaultConfig(t, fmt.Sprintf(`defaults:
  interval: 2s
  timeout: 1500ms
targets:
  - name: hardlink
    path: %s
    probes:
      - {name: rand, kind: random, file_size: %d, block_size: 4KiB, queue_depth: 4, duration: 200ms}
`, root, randomSize))
	d := startFaultDaemon(t, bin, cfg)
	waitFor(t, "three runs of the random probe", func() bool {
		m := d.metrics()
		ok, _ := m.get("plateau_probe_runs_total", "target=hardlink", "result=success")
		bad, _ := m.get("plateau_probe_runs_total", "target=hardlink", "result=failure")
		return ok+bad >= 3
	})
	d.stop()
	out.check(t)
	checkOwnFile(t, filepath.Join(probeDir, "keep.rand", "random.dat"))
}

// pattern is content that a probe's writes could not leave unchanged.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/4096)
	}
	return b
}
