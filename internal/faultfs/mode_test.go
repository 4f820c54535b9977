package faultfs

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// allOps lists every operation the FS intercepts.
func allOps() []Op {
	return []Op{
		OpLookup, OpGetattr, OpStatx, OpSetattr, OpReadlink, OpSymlink, OpMknod, OpMkdir, OpUnlink,
		OpRmdir, OpRename, OpLink, OpOpen, OpRead, OpWrite, OpStatfs, OpRelease, OpFsync,
		OpSetxattr, OpGetxattr, OpListxattr, OpRemovexattr, OpFlush, OpOpendir, OpReaddir,
		OpReleasedir, OpFsyncdir, OpCreate, OpTmpfile, OpFallocate, OpLseek, OpCopyFileRange,
	}
}

func TestDecide(t *testing.T) {
	reads := []Op{OpRead, OpReaddir, OpReadlink, OpCopyFileRange}
	allocs := []Op{OpWrite, OpFsync, OpFsyncdir, OpCreate, OpMkdir, OpMknod, OpSymlink, OpLink,
		OpTmpfile, OpFallocate, OpSetxattr, OpCopyFileRange}
	mutates := []Op{OpWrite, OpCreate, OpMkdir, OpMknod, OpSymlink, OpLink, OpTmpfile, OpFallocate,
		OpSetxattr, OpCopyFileRange, OpSetattr, OpUnlink, OpRmdir, OpRename, OpRemovexattr}
	for _, tc := range []struct {
		mode  Mode
		fails []Op
		errno syscall.Errno
	}{
		{Normal(), nil, 0},
		{FailReadEIO(), reads, unix.EIO},
		{FailWriteENOSPC(), allocs, unix.ENOSPC},
		{FailWriteEDQUOT(), allocs, unix.EDQUOT},
		{ReadOnly(), mutates, unix.EROFS},
		{Stale(), allOps(), unix.ESTALE},
	} {
		for _, op := range allOps() {
			want := verdict{}
			if slices.Contains(tc.fails, op) {
				want.errno = tc.errno
			}
			if got := decide(tc.mode, classOf(op)); got != want {
				t.Errorf("decide(%s, %s) = %+v, want %+v", tc.mode, op, got, want)
			}
		}
	}
	for _, op := range allOps() {
		if got := decide(Hang(), classOf(op)); got != (verdict{hang: true}) {
			t.Errorf("decide(hang, %s) = %+v", op, got)
		}
		if got := decide(Latency(time.Second), classOf(op)); got != (verdict{delay: time.Second}) {
			t.Errorf("decide(latency, %s) = %+v", op, got)
		}
	}
}

func TestOpenForWritingIsAMutation(t *testing.T) {
	for _, tc := range []struct {
		flags uint32
		erofs bool
	}{
		{syscall.O_RDONLY, false},
		{syscall.O_RDONLY | syscall.O_DIRECT | syscall.O_NOATIME, false},
		{syscall.O_WRONLY, true},
		{syscall.O_RDWR, true},
		{syscall.O_RDONLY | syscall.O_TRUNC, true},
		{syscall.O_WRONLY | syscall.O_APPEND, true},
	} {
		c := classOf(OpOpen) | openClass(tc.flags)
		if got := decide(ReadOnly(), c).errno == unix.EROFS; got != tc.erofs {
			t.Errorf("read-only open with flags %#o: EROFS=%v, want %v", tc.flags, got, tc.erofs)
		}
		if got := decide(FailWriteENOSPC(), c); got != (verdict{}) {
			t.Errorf("open with flags %#o on a full file system: %+v, want pass", tc.flags, got)
		}
	}
}

func TestModeValues(t *testing.T) {
	if (Mode{}) != Normal() {
		t.Error("the zero Mode is not Normal")
	}
	if Latency(0) != Normal() || Latency(-time.Second) != Normal() {
		t.Error("a non-positive latency is not Normal")
	}
	if Latency(time.Millisecond) == Latency(2*time.Millisecond) {
		t.Error("latencies of different durations compare equal")
	}
	seen := map[string]bool{}
	for _, m := range []Mode{Normal(), Hang(), Latency(20 * time.Millisecond), FailReadEIO(),
		FailWriteENOSPC(), FailWriteEDQUOT(), ReadOnly(), Stale()} {
		s := m.String()
		if seen[s] {
			t.Errorf("two modes are named %q", s)
		}
		seen[s] = true
	}
	if got := Latency(20 * time.Millisecond).String(); got != "latency(20ms)" {
		t.Errorf("Latency(20ms).String() = %q", got)
	}
}
