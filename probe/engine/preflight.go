package engine

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// checkFree says why a data probe would be skipped for min_free_ratio, or
// "" when it runs. A probe that writes no data (a metadata probe of empty
// files) runs on, so a full file system still has its metadata measured.
func checkFree(dir *probeDir, req probe.Request) (string, error) {
	if req.MinFreeRatio <= 0 || probe.BytesPerRun(&req.Probe) == 0 {
		return "", nil
	}
	free, err := freeRatio(dir.fd)
	if err != nil {
		return "", err
	}
	if free < req.MinFreeRatio {
		return fmt.Sprintf("%.1f%% free is below min_free_ratio %.1f%%", 100*free, 100*req.MinFreeRatio), nil
	}
	return "", nil
}

// Preflight runs the checks Execute makes before a probe's I/O, with the
// same code and so the same words: the probe directory's safety (the
// target path's mode and sticky bit, the directory's owner, mode and
// symlink), and min_free_ratio. check-config calls it so that a target the
// probes would refuse is refused before deployment. skip is the reason a
// data probe would be skipped (not an error: the daemon skips and goes on).
// A probe directory (or a create_path target) that did not exist before
// is removed again: run by root, check-config would otherwise leave a
// root-owned directory that the daemon's user is then refused.
func Preflight(req probe.Request) (skip string, err error) {
	full := req.Path + "/" + req.Hostname
	_, statErr := os.Lstat(full)
	dirNew := errors.Is(statErr, os.ErrNotExist)
	_, statErr = os.Lstat(req.Path)
	pathNew := req.CreatePath && errors.Is(statErr, os.ErrNotExist)
	dir, err := openProbeDir(req.Path, req.Hostname, req.CreatePath)
	defer func() {
		// rmdir removes only an empty directory: never anything else.
		if dirNew {
			_ = unix.Rmdir(full)
		}
		if pathNew {
			_ = unix.Rmdir(req.Path)
		}
	}()
	if err != nil {
		return "", err
	}
	defer dir.Close()
	return checkFree(dir, req)
}
