package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// fakeLfs writes an lfs that runs script, with "$3" the directory asked.
func fakeLfs(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lfs")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func onLustre(string) (int64, error) { return lustreSuperMagic, nil }

// The layout lines follow what `lfs getstripe -d DIR` prints for a
// directory's default layout: stripe_count, stripe_size, pattern and
// stripe_offset on one line (2.10 prints the pattern as 0, later
// releases as raid0).
func TestCheckConfigSaysWhichOSTsATargetUses(t *testing.T) {
	target := &probe.Target{Name: "ost7", Path: "/lustre/scratch/plateau/ost7"}
	for _, tc := range []struct {
		name, script   string
		fsType         func(string) (int64, error)
		info, warning  string
		timeoutSeconds float64
	}{
		{"per-OST target", `echo "stripe_count:  1 stripe_size:   1048576 pattern:       raid0 stripe_offset: 7"`, onLustre,
			"target ost7: Lustre, every probe file on OST index 7 (stripe_count 1): a per-OST target", "", 5},
		{"2.10 format, spread", `echo "stripe_count: 4 stripe_size: 1048576 pattern: 0 stripe_offset: -1"`, onLustre,
			"target ost7: Lustre, stripe_count 4, stripe_offset -1: probe files spread over OSTs", "", 5},
		{"lfs fails", `echo "lfs getstripe: cannot open '$3': No such file or directory (2)" >&2; exit 2`, onLustre,
			"", "is on Lustre, but its layout cannot be checked", 5},
		{"lfs prints no layout", `echo "$3 has no stripe info"`, onLustre,
			"", "no stripe_count and stripe_offset", 5},
		{"lfs hangs", `exec sleep 60`, onLustre, "", "no answer in 200ms", 0.2},
		{"statfs hangs", `exit 1`, func(string) (int64, error) { time.Sleep(time.Minute); return 0, nil },
			"", "cannot tell whether /lustre/scratch/plateau/ost7 is on Lustre: no answer in 200ms", 0.2},
		{"statfs fails", `exit 1`, func(string) (int64, error) { return 0, errors.New("stale file handle") },
			"", "stale file handle", 5},
		{"not Lustre", `echo "stripe_count: 1 stripe_offset: 3"`, func(string) (int64, error) { return 0xEF53, nil }, "", "", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := layoutCheck{fsType: tc.fsType, lfs: fakeLfs(t, tc.script), timeout: time.Duration(tc.timeoutSeconds * float64(time.Second))}
			begin := time.Now()
			info, warning := lc.lustreLayout(target)
			if d := time.Since(begin); d > 30*time.Second {
				t.Errorf("took %s: a hung lfs or statfs must not hang check-config", d)
			}
			if (tc.info == "") != (info == "") || !strings.HasPrefix(info, tc.info) {
				t.Errorf("info %q, want it to start with %q", info, tc.info)
			}
			if (tc.warning == "") != (warning == "") || !strings.Contains(warning, tc.warning) {
				t.Errorf("warning %q, want it to contain %q", warning, tc.warning)
			}
			if tc.warning != "" && !strings.Contains(warning, "target ost7") {
				t.Errorf("warning %q does not name the target", warning)
			}
		})
	}
}

// check-config prints each Lustre target's layout beside its I/O, and a
// layout it cannot check as a warning that names the target.
func TestCheckConfigPrintsEachLustreTargetsLayout(t *testing.T) {
	cfg, _ := characterizeConfig(t, "",
		"ost3:    probes:\n      - {name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB}\n",
		"wide:    probes:\n      - {name: seq, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB}\n")
	lfs := fakeLfs(t, `case "$3" in
*ost3*) echo "stripe_count:  1 stripe_size:   1048576 pattern:       raid0 stripe_offset: 3";;
*) echo "lfs getstripe: $3: Permission denied" >&2; exit 13;;
esac`)
	var out strings.Builder
	err := checkConfig(&out, checkOptions{configFile: cfg, hostname: "h", fleetBin: time.Minute,
		layout: layoutCheck{fsType: onLustre, lfs: lfs, timeout: 5 * time.Second}})
	if err != nil {
		t.Fatalf("check-config: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"target ost3: Lustre, every probe file on OST index 3 (stripe_count 1): a per-OST target",
		"warning: target wide: ",
		"its layout cannot be checked",
		"Permission denied",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check-config output lacks %q:\n%s", want, out.String())
		}
	}
}
