package faultfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fusectlDir is where the fusectl file system lists FUSE connections;
// writing to <dir>/<id>/abort ends one, failing its callers with ENOTCONN
// (Documentation/filesystems/fuse.rst, "Control filesystem").
const fusectlDir = "/sys/fs/fuse/connections"

// mountEntry is the part of one /proc/<pid>/mountinfo line the FS needs.
type mountEntry struct {
	major, minor uint32
	mountPoint   string
	fsType       string
}

// parseMountinfo reads the format of proc(5) /proc/<pid>/mountinfo:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
//
// that is mount ID, parent ID, major:minor, root, mount point, options,
// zero or more optional fields ended by "-", then file system type,
// source and super options. Paths are octal-escaped (space is \040).
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	// Mount options of overlay mounts can make lines long.
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		e, err := parseMountinfoLine(text)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return out, nil
}

func parseMountinfoLine(line string) (mountEntry, error) {
	f := strings.Fields(line)
	if len(f) < 10 {
		return mountEntry{}, fmt.Errorf("%d fields, want at least 10: %q", len(f), line)
	}
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+2 >= len(f) {
		return mountEntry{}, fmt.Errorf("no \"-\" before type and source: %q", line)
	}
	majStr, minStr, ok := strings.Cut(f[2], ":")
	if !ok {
		return mountEntry{}, fmt.Errorf("device %q is not major:minor", f[2])
	}
	major, err := strconv.ParseUint(majStr, 10, 32)
	if err != nil {
		return mountEntry{}, fmt.Errorf("device major %q: %w", majStr, err)
	}
	minor, err := strconv.ParseUint(minStr, 10, 32)
	if err != nil {
		return mountEntry{}, fmt.Errorf("device minor %q: %w", minStr, err)
	}
	mp, err := unescapeMountinfo(f[4])
	if err != nil {
		return mountEntry{}, fmt.Errorf("mount point: %w", err)
	}
	typ, err := unescapeMountinfo(f[sep+1])
	if err != nil {
		return mountEntry{}, fmt.Errorf("file system type: %w", err)
	}
	return mountEntry{major: uint32(major), minor: uint32(minor), mountPoint: mp, fsType: typ}, nil
}

// unescapeMountinfo undoes the kernel's mangling of space, tab, newline
// and backslash into a backslash and three octal digits.
func unescapeMountinfo(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("truncated escape in %q", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("bad escape %q in %q", s[i:i+4], s)
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// findMount returns the topmost mount at mountPoint: mountinfo lists
// mounts in the order they were made, so a later line stacks on top.
func findMount(entries []mountEntry, mountPoint string) (mountEntry, bool) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].mountPoint == mountPoint {
			return entries[i], true
		}
	}
	return mountEntry{}, false
}

// connectionID is the fusectl directory name of a FUSE mount's
// connection: the superblock's kernel dev_t, MKDEV(major, minor) =
// major<<20 | minor, which differs from the user-space st_dev encoding
// once the minor exceeds 255.
func connectionID(e mountEntry) uint64 {
	return uint64(e.major)<<20 | uint64(e.minor)
}

// readMounts parses this process's mount table. It reads /proc rather
// than stat-ing the mount point, which would send a request to the file
// system and hang when the FS is in Hang mode.
func readMounts() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("faultfs: %w", err)
	}
	defer f.Close()
	entries, err := parseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("faultfs: /proc/self/mountinfo: %w", err)
	}
	return entries, nil
}

// IsMounted reports whether a faultfs (FUSE) mount is on top of
// mountPoint, without sending any request to it.
func IsMounted(mountPoint string) (bool, error) {
	abs, err := filepath.Abs(mountPoint)
	if err != nil {
		return false, fmt.Errorf("faultfs: %w", err)
	}
	entries, err := readMounts()
	if err != nil {
		return false, err
	}
	e, ok := findMount(entries, abs)
	return ok && e.fsType == fsType, nil
}

// abortConnection ends FUSE connection id through fusectl, mounting
// fusectl at its standard place first if nobody has (systemd normally
// does; containers often do not). It reports gone when the kernel no
// longer lists the connection: it ended on its own meanwhile.
func abortConnection(id uint64) (gone bool, err error) {
	entries, err := readMounts()
	if err != nil {
		return false, err
	}
	if e, ok := findMount(entries, fusectlDir); !ok || e.fsType != "fusectl" {
		if err := unix.Mount("fusectl", fusectlDir, "fusectl", 0, ""); err != nil {
			return false, fmt.Errorf("faultfs: mounting fusectl on %s to abort connection %d: %w", fusectlDir, id, err)
		}
	}
	abort := filepath.Join(fusectlDir, strconv.FormatUint(id, 10), "abort")
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		return false, fmt.Errorf("faultfs: aborting FUSE connection %d: %w", id, err)
	}
	return false, nil
}
