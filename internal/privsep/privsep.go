// Package privsep reads and drops the Linux capabilities of the running
// process, for the privilege separation of the NVMe SMART reads:
// the daemon hands CAP_SYS_ADMIN to a small helper and keeps no capability
// at all, and the helper keeps CAP_SYS_ADMIN alone, effective and
// permitted, with nothing inheritable or ambient.
//
// Capabilities are a property of each thread, and a Go process has many.
// Two ways drop them on every thread:
//   - KeepOnly changes every thread of the running process with
//     syscall.AllThreadsSyscall, which the Go runtime supports only in
//     binaries built without cgo (the RPM builds with CGO_ENABLED=0); a
//     cgo build gets ErrAllThreadsUnsupported.
//   - ExecWithout clears all capability sets on the calling thread, locked
//     to it, and replaces the process image with execve: the new image
//     starts with that thread's (empty) credentials on every thread. It
//     works in every build, but only for a process that keeps nothing, since
//     a non-root process without file capabilities carries capabilities
//     across execve only through the ambient set.
//
// golang.org/x/sys/unix is used rather than libcap's Go packages
// (kernel.org/pub/linux/libs/security/libcap/cap and psx): it is already a
// dependency, the three system calls needed are a few lines each, and psx's
// all-thread mechanism in a non-cgo build is the same
// syscall.AllThreadsSyscall.
package privsep

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CapSysAdmin is CAP_SYS_ADMIN's number; MaskSysAdmin is its bit in a
// capability set (0x200000 in /proc/<pid>/status).
const (
	CapSysAdmin  = unix.CAP_SYS_ADMIN
	MaskSysAdmin = uint64(1) << CapSysAdmin
)

// ErrAllThreadsUnsupported is returned by KeepOnly in a binary built with
// cgo, where the Go runtime cannot run a system call on every thread.
var ErrAllThreadsUnsupported = errors.New("changing the capabilities of every thread needs a binary built with CGO_ENABLED=0")

// Sets are the capability sets of one task as /proc/<pid>/status shows
// them, one bit per capability.
type Sets struct {
	Inheritable, Permitted, Effective, Bounding, Ambient uint64
}

// Empty reports whether the task holds no capability in its inheritable,
// permitted, effective or ambient set (the bounding set only limits what it
// could gain).
func (s Sets) Empty() bool {
	return s.Inheritable|s.Permitted|s.Effective|s.Ambient == 0
}

func (s Sets) String() string {
	return fmt.Sprintf("CapInh=%016x CapPrm=%016x CapEff=%016x CapBnd=%016x CapAmb=%016x",
		s.Inheritable, s.Permitted, s.Effective, s.Bounding, s.Ambient)
}

// ReadStatus reads the capability sets from a /proc status file:
// /proc/<pid>/status for a process (its main thread), /proc/thread-self/status
// for the calling thread.
func ReadStatus(path string) (Sets, error) {
	f, err := os.Open(path)
	if err != nil {
		return Sets{}, err
	}
	defer f.Close()
	var s Sets
	fields := map[string]*uint64{"CapInh": &s.Inheritable, "CapPrm": &s.Permitted, "CapEff": &s.Effective, "CapBnd": &s.Bounding, "CapAmb": &s.Ambient}
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		p, want := fields[k]
		if !ok || !want {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return Sets{}, fmt.Errorf("%s: %s: %w", path, k, err)
		}
		*p = n
		seen++
	}
	if err := sc.Err(); err != nil {
		return Sets{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if seen != len(fields) {
		return Sets{}, fmt.Errorf("%s: %d of the 5 capability lines found", path, seen)
	}
	return s, nil
}

// Self returns the calling thread's capability sets.
func Self() (Sets, error) {
	return ReadStatus("/proc/thread-self/status")
}

// capData is the kernel's struct __user_cap_data_struct, version 3: two of
// them hold capabilities 0-31 and 32-63.
type capData struct {
	effective, permitted, inheritable uint32
}

type capHeader struct {
	version uint32
	pid     int32
}

func capsetArgs(effective, permitted, inheritable uint64) (capHeader, [2]capData) {
	h := capHeader{version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]capData
	for i := range d {
		shift := 32 * uint(i)
		d[i] = capData{
			effective:   uint32(effective >> shift),
			permitted:   uint32(permitted >> shift),
			inheritable: uint32(inheritable >> shift),
		}
	}
	return h, d
}

// KeepOnly leaves, on every thread of the process, the capabilities in mask
// (only those of them the process holds) effective and permitted, and
// clears the inheritable and ambient sets. KeepOnly(0) drops everything.
// It cannot add a capability. In a cgo build it returns
// ErrAllThreadsUnsupported and changes nothing.
func KeepOnly(mask uint64) error {
	cur, err := Self()
	if err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	keep := cur.Permitted & mask
	// Ambient first: the ambient set cannot hold what is not permitted and
	// inheritable, so the capset below would clear it too, but explicitly
	// is clearer and also covers kernels that keep it otherwise.
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); errno != 0 {
		if errno == unix.ENOTSUP {
			return ErrAllThreadsUnsupported
		}
		return fmt.Errorf("prctl(PR_CAP_AMBIENT_CLEAR_ALL) on every thread: %w", errno)
	}
	h, d := capsetArgs(keep, keep, 0)
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&d[0])), 0); errno != 0 {
		return fmt.Errorf("capset(effective=permitted=%#x, inheritable=0) on every thread: %w", keep, errno)
	}
	runtime.KeepAlive(&h)
	runtime.KeepAlive(&d)
	after, err := Self()
	if err != nil {
		return fmt.Errorf("reading capabilities after dropping them: %w", err)
	}
	if after.Effective != keep || after.Permitted != keep || after.Inheritable != 0 || after.Ambient != 0 {
		return fmt.Errorf("capabilities after dropping all but %#x: %s", keep, after)
	}
	return nil
}

// ExecWithout replaces the process with argv0 (argv, env) after clearing
// every capability set of the calling thread: the new image has no
// capability on any thread. It returns only on failure; the capabilities
// of the calling thread are gone even then, so a caller should exit.
func ExecWithout(argv0 string, argv, env []string) error {
	// The thread stays locked and is never handed back: its credentials
	// differ from the other threads'.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_CAP_AMBIENT_CLEAR_ALL): %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset(0, 0, 0): %w", err)
	}
	if s, err := Self(); err != nil || !s.Empty() {
		return fmt.Errorf("capabilities left after dropping them (%s): %v", s, err)
	}
	if err := syscall.Exec(argv0, argv, env); err != nil {
		return fmt.Errorf("re-executing %s without capabilities: %w", argv0, err)
	}
	return nil
}
