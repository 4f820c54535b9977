//go:build integration

package mfscluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLeftoversScript plays a test killed before its cleanups ran: it
// makes one of each kind of thing .ci/leftovers.sh looks for, and
// requires the script to list each, to refuse -clean while a test binary
// (this one) runs, and with -force to remove each. Everything carries a
// tag of its own, given to -match, so the script touches nothing of the
// tests that CI runs beside this package (packaging, fuzzing).
func TestLeftoversScript(t *testing.T) {
	script, err := filepath.Abs(filepath.Join("..", "..", ".ci", "leftovers.sh"))
	if err != nil {
		t.Fatal(err)
	}
	tag := "leftovertest" + randomID(t)
	dir, err := os.MkdirTemp("/dev/shm", "plateau-test-"+tag+"-")
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	img := filepath.Join(dir, "img")
	ns := "mfsc-" + tag
	cgroup := "/sys/fs/cgroup/blkio/plateau-test-" + tag
	inner := filepath.Join(cgroup, "inner")
	var loop string
	// What the script failed to remove goes here, so that a failure of
	// this test leaves nothing either.
	t.Cleanup(func() {
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
		if loop != "" {
			_ = exec.Command("losetup", "-d", loop).Run()
		}
		_ = exec.Command("ip", "netns", "delete", ns).Run()
		_ = os.Remove(inner)
		_ = os.Remove(cgroup)
		_ = os.RemoveAll(dir)
	})

	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Fatalf("losetup -f --show %s: %v", img, err)
	}
	loop = strings.TrimSpace(string(out))
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	// A process started from the directory, as a test's daemons are: a
	// copy of sleep(1) there.
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(sleepBin)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := filepath.Join(dir, "sleep")
	if err := os.WriteFile(sleeper, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	proc := exec.Command(sleeper, "600")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = proc.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = proc.Process.Kill()
		<-exited
	})

	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%s %s: %v", script, strings.Join(args, " "), err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}

	listed, code := run("-match", tag)
	t.Logf("leftovers.sh -match %s (exit %d):\n%s", tag, code, listed)
	if code != 1 {
		t.Errorf("leftovers.sh listed with exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(listed), "\n")
	for _, want := range []string{
		"process " + strconv.Itoa(proc.Process.Pid) + " " + sleeper + " 600",
		"mount " + mnt,
		"loop device " + loop + " " + img,
		"network namespace " + ns,
		"cgroup " + inner,
		"cgroup " + cgroup,
		"directory " + dir,
	} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.TrimSpace(l) == want }) {
			t.Errorf("leftovers.sh does not list %q", want)
		}
	}
	// A cgroup goes only once its children have.
	if i, j := slices.Index(lines, "cgroup "+inner), slices.Index(lines, "cgroup "+cgroup); i < 0 || j < i {
		t.Errorf("leftovers.sh lists cgroup %s at line %d, before its child at %d", cgroup, j, i)
	}

	if out, code := run("-clean", "-match", tag); code != 2 || !strings.Contains(out, "a test binary is running") {
		t.Errorf("leftovers.sh -clean while this test binary runs: exit %d, want 2 and a refusal:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
		t.Errorf("leftovers.sh -clean removed network namespace %s though it refused: %v", ns, err)
	}

	if out, code := run("-clean", "-force", "-match", tag); code != 0 {
		t.Errorf("leftovers.sh -clean -force: exit %d, want 0:\n%s", code, out)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Errorf("process %d still runs 30 s after leftovers.sh -clean", proc.Process.Pid)
	}
	if mountinfo, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mountinfo), " "+mnt+" ") {
		t.Errorf("%s still mounted after leftovers.sh -clean (%v)", mnt, err)
	}
	if b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(loop), "loop", "backing_file")); err == nil && strings.TrimSpace(string(b)) == img {
		t.Errorf("%s still backed by %s after leftovers.sh -clean", loop, img)
	}
	for _, gone := range []string{filepath.Join("/run/netns", ns), inner, cgroup, dir} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after leftovers.sh -clean (%v)", gone, err)
		}
	}
	if out, code := run("-match", tag); code != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("leftovers.sh after -clean: exit %d, listed:\n%s", code, out)
	}
}
