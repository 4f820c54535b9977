package engine

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// The probe directory's safety rules. The daemon often runs in directories
// that other users can write to (a scratch file system), so every name is
// resolved relative to a directory descriptor with O_NOFOLLOW, the probe
// directory must be ours and not a symlink, and only names matching the
// patterns below, which the probes generate, are ever removed.

const (
	runDirPrefix  = "run."
	keepDirPrefix = "keep."
	lockName      = ".lock"
)

// generatedName matches every file and directory name the probes create
// inside a run or keep directory; sweeping and clean-up remove nothing else.
var generatedName = regexp.MustCompile(`^(w[0-9]+\.dat|shared\.dat|random\.dat|c[0-9]+\.dat|d[0-9]+|f[0-9]+)$`)

// runDirName matches run directories: run.<probe>.<pid>.<unix nanos>.
var runDirName = regexp.MustCompile(`^run\.[A-Za-z0-9_.-]+\.[0-9]+\.[0-9]+$`)

// probeDir is an open, verified <path>/<hostname> directory.
type probeDir struct {
	fd   int
	path string
}

// openProbeDir verifies the target path, creates <path>/<hostname> 0700 if
// needed, and opens it without following symlinks. createPath allows
// creating the target path itself (the embedded default's temp directory).
func openProbeDir(targetPath, hostname string, createPath bool) (*probeDir, error) {
	if hostname == "" || strings.ContainsAny(hostname, "/\x00") || hostname == "." || hostname == ".." {
		return nil, fmt.Errorf("%w: host name %q cannot name a directory", probe.ErrUnsafe, hostname)
	}
	// The target path itself may be a symlink (/scratch -> /gpfs/scratch);
	// what must not be one is the probe directory below it, nor a path
	// the daemon creates itself: that one sits in a shared temp directory,
	// where another user may have made it first.
	openFlags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if createPath {
		if err := os.Mkdir(targetPath, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", targetPath, err)
		}
		openFlags |= unix.O_NOFOLLOW
	}
	parentFD, err := unix.Open(targetPath, openFlags, 0)
	if err != nil {
		if createPath && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) {
			return nil, fmt.Errorf("%w: %s is a symlink or not a directory; this daemon creates it itself (mode 0700) and will not use one someone else made: remove it, or name a target path in a config file", probe.ErrUnsafe, targetPath)
		}
		return nil, fmt.Errorf("open target path %s: %w", targetPath, err)
	}
	defer unix.Close(parentFD)
	var pst unix.Stat_t
	if err := unix.Fstat(parentFD, &pst); err != nil {
		return nil, fmt.Errorf("stat %s: %w", targetPath, err)
	}
	if createPath && (int(pst.Uid) != os.Geteuid() || pst.Mode&0o077 != 0) {
		return nil, fmt.Errorf("%w: %s is owned by uid %d with mode %o; this daemon creates it itself, owned by uid %d with mode 0700, and will not use one someone else made: remove it, or name a target path in a config file", probe.ErrUnsafe, targetPath, pst.Uid, pst.Mode&0o7777, os.Geteuid())
	}
	// A member of the group, like any user of a world-writable directory,
	// could rename the probe directory away and put their own in its place;
	// only the sticky bit stops that.
	if pst.Mode&(unix.S_IWOTH|unix.S_IWGRP) != 0 && pst.Mode&unix.S_ISVTX == 0 {
		who := "world-writable"
		if pst.Mode&unix.S_IWOTH == 0 {
			who = "group-writable"
		}
		return nil, fmt.Errorf("%w: %s is %s without the sticky bit, so another user could replace the probe directory", probe.ErrUnsafe, targetPath, who)
	}
	if err := unix.Mkdirat(parentFD, hostname, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("create probe directory %s/%s: %w", targetPath, hostname, err)
	}
	full := targetPath + "/" + hostname
	fd, err := unix.Openat(parentFD, hostname, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%w: %s is a symlink or not a directory", probe.ErrUnsafe, full)
		}
		return nil, fmt.Errorf("open probe directory %s: %w", full, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", full, err)
	}
	if int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s is owned by uid %d, not by this daemon's uid %d", probe.ErrUnsafe, full, st.Uid, os.Geteuid())
	}
	if st.Mode&(unix.S_IWGRP|unix.S_IWOTH) != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s is writable by group or others (mode %o); it must be 0700", probe.ErrUnsafe, full, st.Mode&0o7777)
	}
	return &probeDir{fd: fd, path: full}, nil
}

func (d *probeDir) Close() error { return unix.Close(d.fd) }

// lock takes the probe directory's lock so that one probe at a time runs
// per target and host, also across processes (the daemon and a `probe`
// command from a Slurm prolog). It fails at once when another holds it.
func (d *probeDir) lock() (func(), error) {
	fd, err := unix.Openat(d.fd, lockName, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s/%s: %w", d.path, lockName, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errBusy
		}
		return nil, fmt.Errorf("lock %s/%s: %w", d.path, lockName, err)
	}
	return func() { unix.Close(fd) }, nil
}

// errBusy reports that another process is probing this target.
var errBusy = errors.New("another probe holds this target's lock")

// sweep removes run directories left by killed runs. It must only be called
// with the lock held, so no live run is touched.
func (d *probeDir) sweep() (int, error) {
	names, err := readDirNames(d.fd)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", d.path, err)
	}
	removed := 0
	var errs []error
	for _, name := range names {
		if !runDirName.MatchString(name) {
			continue
		}
		if err := removeGeneratedTree(d.fd, name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// sweepKeepDirs removes the keep directories of probes no longer configured
// on this target, so files kept across runs (the random probe's file, the
// cold-read set) do not outlive their probe.
func (d *probeDir) sweepKeepDirs(configured []string) error {
	names, err := readDirNames(d.fd)
	if err != nil {
		return fmt.Errorf("list %s: %w", d.path, err)
	}
	want := map[string]bool{}
	for _, p := range configured {
		want[keepDirPrefix+p] = true
	}
	var errs []error
	for _, name := range names {
		if strings.HasPrefix(name, keepDirPrefix) && probe.ValidName(strings.TrimPrefix(name, keepDirPrefix)) && !want[name] {
			errs = append(errs, removeGeneratedTree(d.fd, name))
		}
	}
	return errors.Join(errs...)
}

// keepDir holds a probe's files that live across runs.
type keepDir struct {
	parent *probeDir
	fd     int
	name   string
}

// openKeepDir opens (creating it 0700 if needed) keep.<probe>, refusing a
// symlink or a directory that is not ours.
func (d *probeDir) openKeepDir(probeName string) (*keepDir, error) {
	name := keepDirPrefix + probeName
	if err := unix.Mkdirat(d.fd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("create %s/%s: %w", d.path, name, err)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%w: %s/%s is a symlink or not a directory", probe.ErrUnsafe, d.path, name)
		}
		return nil, fmt.Errorf("open %s/%s: %w", d.path, name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != os.Geteuid() {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s/%s is not owned by this daemon's uid", probe.ErrUnsafe, d.path, name)
	}
	return &keepDir{parent: d, fd: fd, name: name}, nil
}

func (k *keepDir) Close() error { return unix.Close(k.fd) }

func (k *keepDir) path() string { return k.parent.path + "/" + k.name }

// runDir is the scratch directory of one run.
type runDir struct {
	parent *probeDir
	fd     int
	name   string
}

func (d *probeDir) newRunDir(probeName string) (*runDir, error) {
	name := runDirPrefix + probeName + "." + strconv.Itoa(os.Getpid()) + "." + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := unix.Mkdirat(d.fd, name, 0o700); err != nil {
		return nil, fmt.Errorf("create run directory %s/%s: %w", d.path, name, err)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
		return nil, fmt.Errorf("open run directory %s/%s: %w", d.path, name, err)
	}
	return &runDir{parent: d, fd: fd, name: name}, nil
}

func (r *runDir) path() string { return r.parent.path + "/" + r.name }

// remove deletes the run directory and the generated names in it.
func (r *runDir) remove() error {
	unix.Close(r.fd)
	return removeGeneratedTree(r.parent.fd, r.name)
}

// removeGeneratedTree removes dirfd/name and, below it, only generated names,
// two levels deep at most (metadata worker directories hold files). A name
// it did not generate stays, and the directory with it.
func removeGeneratedTree(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			// A symlink or file where our directory should be: unlink the
			// name itself, never what it points to.
			return unlinkName(dirfd, name, 0)
		}
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(fd)
	names, err := readDirNames(fd)
	if err != nil {
		return fmt.Errorf("list %s: %w", name, err)
	}
	var errs []error
	for _, n := range names {
		if !generatedName.MatchString(n) {
			errs = append(errs, fmt.Errorf("%s/%s was not created by plateau_exporter; left in place", name, n))
			continue
		}
		err := unlinkName(fd, n, 0)
		if errors.Is(err, unix.EISDIR) {
			err = removeGeneratedTree(fd, n)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := unlinkName(dirfd, name, unix.AT_REMOVEDIR); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func unlinkName(dirfd int, name string, flags int) error {
	err := unix.Unlinkat(dirfd, name, flags)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// readDirNames lists a directory by descriptor; it dups the descriptor so
// the caller's stays open and positioned.
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}
