package collector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeGPFSDiag is fakeGPFS with every diagnosis command on its fake and the
// fixture /proc/mounts.
func fakeGPFSDiag(t *testing.T, timeout time.Duration) gpfsConfig {
	t.Helper()
	cfg := fakeGPFS(t, "mmpmon", timeout)
	cfg.mmdiagPath = fixturePath(t, "gpfs", "mmdiag")
	cfg.mmfsadmPath = fixturePath(t, "gpfs", "mmfsadm")
	cfg.mmlsfsPath = fixturePath(t, "gpfs", "mmlsfs")
	cfg.mmlsdiskPath = fixturePath(t, "gpfs", "mmlsdisk")
	cfg.mmlsqosPath = fixturePath(t, "gpfs", "mmlsqos")
	cfg.mountsPath = fixturePath(t, "proc", "mounts")
	cfg.waitersInterval, cfg.disksInterval, cfg.qosInterval = time.Hour, time.Hour, time.Hour
	return cfg
}

// The gpfs collector's diagnosis commands on their fakes and fixtures,
// compared with the expected exposition; every file system mmlsfs lists or
// /proc/mounts has is asked about, each exactly once per command.
func TestGPFSDiagnosis(t *testing.T) {
	requests := filepath.Join(t.TempDir(), "requests")
	t.Setenv("FAKE_GPFS_REQUESTLOG", requests)
	c := newTestGPFS(t, fakeGPFSDiag(t, 30*time.Second))
	file := filepath.Join("fixtures", "expected", "gpfs_diag.prom")
	compareWithFile(t, newTestRegistry("gpfs", c, nil), file, metricNames(t, file)...)

	data, err := os.ReadFile(requests)
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]int{}
	for _, l := range strings.Fields(string(data)) {
		asked[l]++
	}
	for _, fs := range []string{"archive", "home", "projects", "scratch"} {
		if asked[fs] != 2 {
			t.Errorf("file system %s was asked about %d times, want once by mmlsdisk and once by mmlsqos (log %q)", fs, asked[fs], data)
		}
	}
}

// Without mmlsfs the file systems come from /proc/mounts: the mounted ones
// are asked about and reported, and nothing claims an unmounted one.
func TestGPFSDiagnosisWithoutMmlsfs(t *testing.T) {
	requests := filepath.Join(t.TempDir(), "requests")
	t.Setenv("FAKE_GPFS_REQUESTLOG", requests)
	cfg := fakeGPFSDiag(t, 30*time.Second)
	cfg.mmlsfsPath = ""
	cfg.nsd = false
	reg := newTestRegistry("gpfs", newTestGPFS(t, cfg), nil)
	want := "\n" + gpfsDisksNotUpHelp + `
plateau_gpfs_disks_not_up{filesystem="home"} 0
plateau_gpfs_disks_not_up{filesystem="projects"} 0
plateau_gpfs_disks_not_up{filesystem="scratch"} 2
` + scrapeSuccessHelp + `
plateau_scrape_collector_success{collector="gpfs"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_gpfs_disks_not_up", "plateau_scrape_collector_success"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "plateau_gpfs_filesystem_mounted"); err != nil || n != 6 {
		t.Errorf("got %d mount series (err %v), want rw and ro of the 3 mounted file systems", n, err)
	}
	if got, _ := os.ReadFile(requests); strings.Contains(string(got), "archive") {
		t.Errorf("the unmounted archive was asked about without mmlsfs listing it: %q", got)
	}
}

// A name mmlsfs prints that is not a device name never reaches a command
// line, and the run says so; the valid ones are still asked about.
func TestGPFSInvalidFilesystemNameNotPassed(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"fs_io_s.txt", "mmlsdisk-scratch.txt", "mmlsqos-scratch.txt"} {
		copyGPFSFixture(t, dir, f, f, 0o644)
	}
	mmlsfs := "mmlsfs::HEADER:version:reserved:reserved:deviceName:fieldName:data:remarks:\n" +
		"mmlsfs::0:1:::scratch:defaultMountPoint:%2Fgpfs%2Fscratch::\n" +
		"mmlsfs::0:1:::x%3Brm -rf %2F:defaultMountPoint:%2Fx::\n" +
		"mmlsfs::0:1:::-L:defaultMountPoint:%2Fy::\n" +
		"mmlsfs::0:1:::..:defaultMountPoint:%2Fz::\n"
	if err := os.WriteFile(filepath.Join(dir, "mmlsfs.txt"), []byte(mmlsfs), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_GPFS_FIXTURES", dir)
	requests := filepath.Join(t.TempDir(), "requests")
	t.Setenv("FAKE_GPFS_REQUESTLOG", requests)
	cfg := fakeGPFSDiag(t, 30*time.Second)
	cfg.nsd = false
	cfg.mmgetstatePath, cfg.mmhealthPath, cfg.mmdiagPath, cfg.mmfsadmPath, cfg.mountsPath = "", "", "", "", ""
	c := newTestGPFS(t, cfg)
	// The rows with invalid names cost themselves only: counted, and
	// the collector still succeeds with scratch.
	if _, err := collectAll(c); err != nil {
		t.Errorf("Update error = %v, want none", err)
	}
	if n, _ := parseErrorCount(c, gpfsSourceMmlsfs); n != 3 {
		t.Errorf("mmlsfs parse errors = %d, want the 3 invalid names", n)
	}
	// mmpmon logs its request to the same file.
	got, _ := os.ReadFile(requests)
	if devices := strings.ReplaceAll(string(got), "fs_io_s\n", ""); devices != "scratch\nscratch\n" {
		t.Errorf("devices passed to mmlsdisk and mmlsqos: %q, want only scratch, once each", devices)
	}
	reg := newTestRegistry("gpfs", c, nil)
	if n, err := testutil.GatherAndCount(reg, "plateau_gpfs_disk_up"); err != nil || n != 6 {
		t.Errorf("got %d disk series (err %v), want scratch's 6", n, err)
	}
}

// mmlsdisk failing for one file system fails the command but keeps the
// others' disks; the failed one has no counts rather than a false 0.
func TestGPFSMmlsdiskFailsForOneFilesystem(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"fs_io_s.txt", "mmlsfs.txt", "mmlsdisk-scratch.txt", "mmlsdisk-home.txt", "mmlsdisk-archive.txt"} {
		copyGPFSFixture(t, dir, f, f, 0o644)
	}
	t.Setenv("FAKE_GPFS_FIXTURES", dir)
	cfg := fakeGPFSDiag(t, 30*time.Second)
	cfg.nsd = false
	cfg.mmgetstatePath, cfg.mmhealthPath, cfg.mmdiagPath, cfg.mmfsadmPath, cfg.mmlsqosPath = "", "", "", "", ""
	c := newTestGPFS(t, cfg)
	_, err := collectAll(c)
	if err == nil || !strings.Contains(err.Error(), "mmlsdisk projects") || !strings.Contains(err.Error(), "exited with status 1") {
		t.Errorf("Update error = %v, want mmlsdisk's failure on projects", err)
	}
	want := "\n" + gpfsDisksNotUpHelp + `
plateau_gpfs_disks_not_up{filesystem="archive"} 0
plateau_gpfs_disks_not_up{filesystem="home"} 0
plateau_gpfs_disks_not_up{filesystem="scratch"} 2
` + gpfsCommandSuccessHelp + `
plateau_gpfs_command_success{command="mmlsdisk"} 0
plateau_gpfs_command_success{command="mmlsfs"} 1
plateau_gpfs_command_success{command="mmpmon"} 1
`
	reg := newTestRegistry("gpfs", c, nil)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_gpfs_disks_not_up", "plateau_gpfs_command_success"); err != nil {
		t.Error(err)
	}
}

// A hung mmdiag or mmlsdisk fails only its own command: the first scrape
// returns within the deadline with every other command's answer, later
// scrapes answer at once from the last result, a new copy starts only
// after the hung one was killed, and no process of any copy is left.
func TestGPFSHungDiagnosisCommands(t *testing.T) {
	for _, name := range []string{"mmdiag", "mmlsdisk"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// The hanging fake, under the name of the command it stands for.
			copyGPFSFixture(t, dir, name, "mmpmon-hang", 0o755)
			hang := filepath.Join(dir, name)
			countFile := filepath.Join(dir, "starts")
			t.Setenv("FAKE_GPFS_COUNTFILE", countFile)
			const timeout = 2 * time.Second
			cfg := fakeGPFSDiag(t, timeout)
			cfg.nsd = false
			if name == "mmdiag" {
				cfg.mmdiagPath, cfg.waitersInterval = hang, 100*time.Millisecond
			} else {
				cfg.mmlsdiskPath, cfg.disksInterval = hang, 100*time.Millisecond
			}
			c := newHungGPFS(t, cfg, countFile)

			ms, err := collectAll(c)
			if !errors.Is(err, errCommandTimeout) {
				t.Fatalf("first Update error = %v, want %s's timeout", err, name)
			}
			success := map[string]float64{}
			for _, m := range ms {
				if strings.Contains(m.Desc().String(), `"plateau_gpfs_command_success"`) {
					success[label(t, m, "command")] = metricValue(t, m)
				}
			}
			for _, cmd := range []string{"mmpmon", "mmgetstate", "mmhealth", "mmfsadm", "mmdiag", "mmlsfs", "mmlsdisk", "mmlsqos"} {
				want := 1.0
				if cmd == name {
					want = 0
				}
				if got, ok := success[cmd]; !ok || got != want {
					t.Errorf("command_success{command=%q} = %v (present %v), want %v", cmd, got, ok, want)
				}
			}
			if name == "mmlsdisk" && !strings.Contains(err.Error(), "mmlsdisk: 3 more file systems not asked after that") {
				// After the first file system's call timed out, the run
				// asks no other file system: they would hang as well.
				t.Errorf("first Update error = %v, want the other 3 file systems left unasked", err)
			}
			checkHungGPFSCommand(t, c, name, countFile, timeout)
		})
	}
}

func TestNewGPFSCollectorRejectsZeroDiagInterval(t *testing.T) {
	cfg := fakeGPFSDiag(t, time.Second)
	cfg.qosInterval = 0
	if _, err := newGPFSCollector(cfg, nil); err == nil || !strings.Contains(err.Error(), "mmlsqos") {
		t.Errorf("a zero mmlsqos interval: %v", err)
	}
}

// The mount state follows /proc/mounts from one scrape to the next: an
// unmounted file system keeps its series at 0, a remount read-only flips
// the mode.
func TestGPFSMountStateFollowsMounts(t *testing.T) {
	mounts := filepath.Join(t.TempDir(), "mounts")
	write := func(content string) {
		if err := os.WriteFile(mounts, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("scratch /gpfs/scratch gpfs rw,relatime 0 0\nhome /gpfs/home gpfs rw,relatime 0 0\n")
	cfg := fakeGPFSDiag(t, 30*time.Second)
	cfg.mountsPath = mounts
	cfg.nsd, cfg.mmdiagPath, cfg.mmfsadmPath, cfg.mmlsdiskPath, cfg.mmlsqosPath = false, "", "", "", ""
	reg := newTestRegistry("gpfs", newTestGPFS(t, cfg), nil)
	const head = `
# HELP plateau_gpfs_filesystem_mounted 1 if the GPFS file system is mounted at the mount point in this mode, else 0.
# TYPE plateau_gpfs_filesystem_mounted gauge
plateau_gpfs_filesystem_mounted{filesystem="archive",mode="ro",mountpoint="/gpfs/archive"} 0
plateau_gpfs_filesystem_mounted{filesystem="archive",mode="rw",mountpoint="/gpfs/archive"} 0
plateau_gpfs_filesystem_mounted{filesystem="projects",mode="ro",mountpoint="/gpfs/projects"} 0
plateau_gpfs_filesystem_mounted{filesystem="projects",mode="rw",mountpoint="/gpfs/projects"} 0
`
	for _, step := range []struct{ mounts, want string }{
		{"", head + `plateau_gpfs_filesystem_mounted{filesystem="home",mode="ro",mountpoint="/gpfs/home"} 0
plateau_gpfs_filesystem_mounted{filesystem="home",mode="rw",mountpoint="/gpfs/home"} 1
plateau_gpfs_filesystem_mounted{filesystem="scratch",mode="ro",mountpoint="/gpfs/scratch"} 0
plateau_gpfs_filesystem_mounted{filesystem="scratch",mode="rw",mountpoint="/gpfs/scratch"} 1
`},
		{"scratch /gpfs/scratch gpfs ro,relatime 0 0\n", head + `plateau_gpfs_filesystem_mounted{filesystem="home",mode="ro",mountpoint="/gpfs/home"} 0
plateau_gpfs_filesystem_mounted{filesystem="home",mode="rw",mountpoint="/gpfs/home"} 0
plateau_gpfs_filesystem_mounted{filesystem="scratch",mode="ro",mountpoint="/gpfs/scratch"} 1
plateau_gpfs_filesystem_mounted{filesystem="scratch",mode="rw",mountpoint="/gpfs/scratch"} 0
`},
	} {
		if step.mounts != "" {
			write(step.mounts)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(step.want), "plateau_gpfs_filesystem_mounted"); err != nil {
			t.Errorf("after mounts %q: %v", step.mounts, err)
		}
	}
}

// mmdiag output mixing 28 waiter rows with three lines that are not
// (fixtures/gpfs/mmdiag-waiters-junk.txt, in the -Y format of Storage Scale
// 5.x, with junk of the kinds gpfs_exporter's collectors/waiter_test.go
// feeds its parser): every waiter is exported, the three lines are counted,
// and the collector succeeds. Until the parsers kept what they could read,
// this failed with "-Y line 32: row of mmdiag:foobar before its HEADER" and
// exported no waiter.
func TestGPFSWaitersKeepRowsAmongJunk(t *testing.T) {
	dir := t.TempDir()
	copyGPFSFixture(t, dir, "fs_io_s.txt", "fs_io_s.txt", 0o644)
	copyGPFSFixture(t, dir, "mmdiag-waiters.txt", "mmdiag-waiters-junk.txt", 0o644)
	t.Setenv("FAKE_GPFS_FIXTURES", dir)
	cfg := fakeGPFSDiag(t, 30*time.Second)
	cfg.nsd = false
	cfg.mmgetstatePath, cfg.mmhealthPath, cfg.mmfsadmPath, cfg.mountsPath = "", "", "", ""
	cfg.mmlsfsPath, cfg.mmlsdiskPath, cfg.mmlsqosPath = "", "", ""
	logs := &logBuffer{}
	c, err := newGPFSCollector(cfg, level.NewFilter(logs, level.AllowDebug()))
	c = closedAtEnd(t, c, err)
	reg := newTestRegistry("gpfs", c, nil)

	values := map[string]float64{}
	waiters := 0.0
	for _, s := range gatherSeries(t, reg) {
		key := s.name
		for _, lp := range s.metric.GetLabel() {
			key += "," + lp.GetName() + "=" + lp.GetValue()
		}
		values[key] = s.value
		if s.name == "plateau_gpfs_waiters" {
			waiters += s.value
		}
	}
	if waiters != 28 {
		t.Errorf("plateau_gpfs_waiters sum to %v, want all 28 waiter rows", waiters)
	}
	for key, want := range map[string]float64{
		"plateau_collector_parse_errors_total,collector=gpfs,source=mmdiag_waiters": 3,
		"plateau_collector_parse_errors_total,collector=gpfs,source=mmpmon":         0,
		"plateau_gpfs_command_success,command=mmdiag":                               1,
		"plateau_scrape_collector_success,collector=gpfs":                           1,
		"plateau_gpfs_waiter_longest_seconds":                                       85.836,
	} {
		if got, ok := values[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	// The first junk line of the run is logged, once.
	if n := logs.count(`first="line 16: not a -Y line: \"foobar\""`); n != 1 {
		t.Errorf("%d debug lines naming the first junk line, want 1; log %q", n, logs.lines)
	}

	// The count is kept across runs: a second run adds its three.
	if _, err := c.waiters(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := parseErrorCount(c, gpfsSourceWaiters); n != 6 {
		t.Errorf("after two runs the waiters parse errors are %d, want 6", n)
	}
}
