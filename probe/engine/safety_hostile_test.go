package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// The embedded default's directory, /tmp/plateau_exporter-<uid>, is
// created by the daemon. Another local user can create it first, as a
// symlink to a directory of their choosing: the run must be refused, and
// nothing written where the link points.
func TestCreatedPathPlantedSymlinkRefused(t *testing.T) {
	shared := t.TempDir()
	attacker := t.TempDir()
	path := filepath.Join(shared, "plateau_exporter-1000")
	if err := os.Symlink(attacker, path); err != nil {
		t.Fatal(err)
	}
	req := probefixture.Request(path, probefixture.SmallSeq("s"))
	req.CreatePath = true
	res := Execute(context.Background(), req)
	if res.OK() || res.Reason != probe.ReasonUnsafe || !strings.Contains(res.Error, path) {
		t.Errorf("run in a planted symlink: ok=%v reason %q error %q; want refused (unsafe) naming %s", res.OK(), res.Reason, res.Error, path)
	}
	if ents, _ := os.ReadDir(attacker); len(ents) != 0 {
		t.Errorf("the run wrote into the symlink's target: %v", ents)
	}
}

// A directory someone else prepared with a loose mode is refused too (the
// same user cannot change ownership without root; the mode shows it).
func TestCreatedPathWrongModeRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plateau_exporter-1000")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
	req := probefixture.Request(path, probefixture.SmallSeq("s"))
	req.CreatePath = true
	res := Execute(context.Background(), req)
	if res.OK() || res.Reason != probe.ReasonUnsafe || !strings.Contains(res.Error, "0700") {
		t.Errorf("run in a 0755 created path: ok=%v reason %q error %q; want refused (unsafe)", res.OK(), res.Reason, res.Error)
	}
}

// A group-writable target path without the sticky bit lets any member of
// the group rename the probe directory away and plant their own.
func TestGroupWritableTargetWithoutStickyRefused(t *testing.T) {
	target := t.TempDir()
	if err := os.Chmod(target, 0o770); err != nil {
		t.Fatal(err)
	}
	res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s")))
	if res.OK() || res.Reason != probe.ReasonUnsafe || !strings.Contains(res.Error, "group-writable") {
		t.Errorf("group-writable target: ok=%v reason %q error %q; want refused (unsafe)", res.OK(), res.Reason, res.Error)
	}
	// With the sticky bit (as /tmp has) it is safe.
	if err := os.Chmod(target, 0o770|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if res := Execute(context.Background(), probefixture.Request(target, probefixture.SmallSeq("s"))); !res.OK() {
		t.Errorf("group-writable sticky target refused: %s", res.Error)
	}
}
