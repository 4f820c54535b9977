package faultfs

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kind is what a Mode injects; the zero value is pass-through so a zero
// Mode is Normal.
type kind uint8

const (
	kindNormal kind = iota
	kindHang
	kindLatency
	kindFailReadEIO
	kindFailWriteENOSPC
	kindFailWriteEDQUOT
	kindReadOnly
	kindStale
)

// Mode is the behaviour of a mounted FS, switched at run time with
// (*FS).Set. Build one with Normal, Hang, Latency, FailReadEIO,
// FailWriteENOSPC, FailWriteEDQUOT, ReadOnly or Stale. The zero Mode is
// Normal. Modes are comparable values.
type Mode struct {
	kind  kind
	delay time.Duration
}

// Normal passes every operation through to the backing directory.
func Normal() Mode { return Mode{} }

// Hang blocks every operation until the mode changes (Set, Release or
// Unmount) or the kernel interrupts the request because the caller got a
// fatal signal. An interrupted operation fails with EINTR, which is what
// lets a SIGKILLed process leave the file system, as on a hard NFS mount.
func Hang() Mode { return Mode{kind: kindHang} }

// Latency delays every operation by d before passing it through. The
// wait is interruptible like Hang; a non-positive d is Normal.
func Latency(d time.Duration) Mode {
	if d <= 0 {
		return Normal()
	}
	return Mode{kind: kindLatency, delay: d}
}

// FailReadEIO fails data reads (read, readdir, readlink, copy_file_range)
// with EIO, as a disk with unreadable sectors does; everything else passes.
func FailReadEIO() Mode { return Mode{kind: kindFailReadEIO} }

// FailWriteENOSPC fails every operation that allocates space (write,
// fsync, create, mkdir, mknod, symlink, link, fallocate, copy_file_range,
// setxattr, O_TMPFILE) with ENOSPC, as a full file system does. Flush
// (close) still succeeds, so the error reaches the writer on write or
// fsync, where a probe looks for it.
func FailWriteENOSPC() Mode { return Mode{kind: kindFailWriteENOSPC} }

// FailWriteEDQUOT is FailWriteENOSPC with EDQUOT, as an exhausted user or
// fileset quota does.
func FailWriteEDQUOT() Mode { return Mode{kind: kindFailWriteEDQUOT} }

// ReadOnly fails every operation that would change the file system with
// EROFS, including an open for writing or truncating, as after a
// remount read-only on errors. Reads, stats and fsync pass.
func ReadOnly() Mode { return Mode{kind: kindReadOnly} }

// Stale fails every operation with ESTALE, as an NFS client does after
// the server lost the export or the file handle.
func Stale() Mode { return Mode{kind: kindStale} }

// String names the mode for test logs, e.g. "hang" or "latency(20ms)".
func (m Mode) String() string {
	switch m.kind {
	case kindNormal:
		return "normal"
	case kindHang:
		return "hang"
	case kindLatency:
		return fmt.Sprintf("latency(%s)", m.delay)
	case kindFailReadEIO:
		return "fail-read-eio"
	case kindFailWriteENOSPC:
		return "fail-write-enospc"
	case kindFailWriteEDQUOT:
		return "fail-write-edquot"
	case kindReadOnly:
		return "read-only"
	case kindStale:
		return "stale"
	}
	return fmt.Sprintf("mode(%d)", m.kind)
}

// Op names a FUSE operation as the kernel sends it; the values are the
// lower-case FUSE opcode names. Count reports how many of each the FS saw.
type Op string

// The operations the FS intercepts. FORGET, INTERRUPT, INIT and DESTROY
// carry no reply, so they cannot be faulted and are not counted.
const (
	OpLookup        Op = "lookup"
	OpGetattr       Op = "getattr"
	OpStatx         Op = "statx"
	OpSetattr       Op = "setattr"
	OpReadlink      Op = "readlink"
	OpSymlink       Op = "symlink"
	OpMknod         Op = "mknod"
	OpMkdir         Op = "mkdir"
	OpUnlink        Op = "unlink"
	OpRmdir         Op = "rmdir"
	OpRename        Op = "rename"
	OpLink          Op = "link"
	OpOpen          Op = "open"
	OpRead          Op = "read"
	OpWrite         Op = "write"
	OpStatfs        Op = "statfs"
	OpRelease       Op = "release"
	OpFsync         Op = "fsync"
	OpSetxattr      Op = "setxattr"
	OpGetxattr      Op = "getxattr"
	OpListxattr     Op = "listxattr"
	OpRemovexattr   Op = "removexattr"
	OpFlush         Op = "flush"
	OpOpendir       Op = "opendir"
	OpReaddir       Op = "readdir"
	OpReleasedir    Op = "releasedir"
	OpFsyncdir      Op = "fsyncdir"
	OpCreate        Op = "create"
	OpTmpfile       Op = "tmpfile"
	OpFallocate     Op = "fallocate"
	OpLseek         Op = "lseek"
	OpCopyFileRange Op = "copy_file_range"
)

// class is a set of properties of one request that decide which faults
// apply to it.
type class uint8

const (
	// classRead marks requests that read file or directory data.
	classRead class = 1 << iota
	// classAlloc marks requests that may need free blocks or inodes.
	classAlloc
	// classMutate marks requests that change the file system.
	classMutate
)

// classOf is a switch rather than a map so the table cannot be changed
// at run time.
func classOf(op Op) class {
	switch op {
	case OpRead, OpReaddir, OpReadlink:
		return classRead
	case OpWrite, OpCreate, OpMkdir, OpMknod, OpSymlink, OpLink, OpTmpfile,
		OpFallocate, OpSetxattr:
		return classAlloc | classMutate
	case OpCopyFileRange:
		return classRead | classAlloc | classMutate
	case OpFsync, OpFsyncdir:
		// fsync is where delayed allocation reports ENOSPC, yet it
		// changes nothing a read-only mount would refuse.
		return classAlloc
	case OpSetattr, OpUnlink, OpRmdir, OpRename, OpRemovexattr:
		return classMutate
	}
	return 0
}

// openClass adds the mutate class to an open whose flags ask for write
// access or truncation, which a read-only file system refuses.
func openClass(flags uint32) class {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return classMutate
	}
	return 0
}

// verdict is what the FS does with one request before passing it
// through: wait (forever or for delay), then fail with errno or proceed.
type verdict struct {
	hang  bool
	delay time.Duration
	errno syscall.Errno
}

// decide is the whole fault policy: the mode and the request's class in,
// the verdict out. It is pure so it can be tested without a mount.
func decide(m Mode, c class) verdict {
	// A failing mode fails the requests of the classes it affects and
	// lets the others through.
	failIf := func(affected class, errno unix.Errno) verdict {
		if c&affected != 0 {
			return verdict{errno: errno}
		}
		return verdict{}
	}
	switch m.kind {
	case kindHang:
		return verdict{hang: true}
	case kindLatency:
		return verdict{delay: m.delay}
	case kindFailReadEIO:
		return failIf(classRead, unix.EIO)
	case kindFailWriteENOSPC:
		return failIf(classAlloc, unix.ENOSPC)
	case kindFailWriteEDQUOT:
		return failIf(classAlloc, unix.EDQUOT)
	case kindReadOnly:
		return failIf(classMutate, unix.EROFS)
	case kindStale:
		return verdict{errno: unix.ESTALE}
	}
	return verdict{}
}
