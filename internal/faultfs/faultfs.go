// Package faultfs owns a fault-injecting FUSE file system for tests: a
// loopback over a real backing directory whose behaviour a test switches
// at run time (Normal, Hang, Latency, FailReadEIO, FailWriteENOSPC,
// FailWriteEDQUOT, ReadOnly, Stale), that can vanish under a running user
// (LazyUnmount), and that counts the operations it sees and holds.
//
// Mounting needs root (CAP_SYS_ADMIN) and /dev/fuse; Check reports what
// is missing. The FS is served by goroutines of the process that mounted
// it, so a test that makes its own syscalls hang must issue them from
// another goroutine, or better from a child process (the daemon under
// test, or the test binary re-executed): a child can be SIGKILLed while
// blocked, and the FS answers the kernel's interrupt so the child really
// dies, as on a hard NFS mount. Never touch the mount point from the
// test's own goroutine while a Hang is in effect.
//
// Unlike a hard NFS mount, where only SIGKILL ends a wait, FUSE lets any
// caught signal interrupt a waiting request, which then fails with EINTR.
// Go's os package retries EINTR, so a Go caller (the daemon's workers)
// still sees a hang that only SIGKILL ends.
//
// The kernel's attribute, entry and negative caches are disabled, so
// every stat, open and lookup reaches the FS and sees the current mode.
// Data reads can still be answered from the page cache of a file opened
// earlier; set Options.DirectIO when a test needs every read to reach the
// FS.
package faultfs

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// fsName is the FUSE subtype, so the mount shows as type fuse.faultfs.
const fsName = "faultfs"

// fsType is how mountinfo lists a faultfs mount.
const fsType = "fuse." + fsName

const (
	// unmountBusyFor is how long Unmount retries a plain unmount that
	// fails with EBUSY (a closing file may still hold the mount for a
	// moment) before detaching it.
	unmountBusyFor = time.Second
	// drainGrace is how long a detached mount may keep serving the
	// processes that still use it before Unmount aborts the connection.
	drainGrace = 2 * time.Second
	// abortWait bounds the wait for the serve loop after an abort, which
	// fails every pending and future request at once.
	abortWait = 30 * time.Second
)

// Options configure Mount. The zero value is ready to use.
type Options struct {
	// Mode is in effect from the first request (default Normal).
	Mode Mode
	// DirectIO opens every file with FOPEN_DIRECT_IO, so the kernel
	// never answers a read from its page cache and every read meets the
	// current mode (as O_DIRECT does for the caller).
	DirectIO bool
	// Debug logs every FUSE request and reply to Logger.
	Debug bool
	// Logger receives go-fuse's diagnostics; nil means log.Default().
	Logger *log.Logger
}

// FS is a mounted fault-injecting file system. Its methods are safe for
// concurrent use.
type FS struct {
	gate       *gate
	backing    string
	mountPoint string
	server     *fuse.Server
	// connID names the FUSE connection under /sys/fs/fuse/connections.
	connID uint64
	// served is closed when go-fuse's serve loop has returned, i.e. the
	// kernel dropped the connection and the FS is gone for everyone.
	served chan struct{}

	mu sync.Mutex
	// detached is set once the mount point no longer names this FS
	// (after LazyUnmount or Unmount), so a later unmount cannot hit a
	// different file system mounted there since.
	detached bool
}

// Mount serves backing at mountPoint (both existing directories) and
// returns once the kernel has completed the FUSE handshake. Release the
// mount with Unmount; MountForTest does that for a test.
func Mount(backing, mountPoint string, opts Options) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("faultfs: backing directory: %w", err)
	}
	mountPoint, err = filepath.Abs(mountPoint)
	if err != nil {
		return nil, fmt.Errorf("faultfs: mount point: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("faultfs: backing directory: %w", &os.PathError{Op: "stat", Path: backing, Err: err})
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("faultfs: backing %s is not a directory", backing)
	}

	g := newGate(opts.Mode)
	root := &node{
		LoopbackNode: &fs.LoopbackNode{RootData: &fs.LoopbackRoot{Path: backing, Dev: st.Dev}},
		gate:         g,
		directIO:     opts.DirectIO,
	}
	root.RootData.RootNode = root

	// Zero timeouts: a cached attribute or dentry would let the kernel
	// answer without asking the FS, and the fault would not show.
	var zero time.Duration
	fsOpts := &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		Logger:          opts.Logger,
		MountOptions: fuse.MountOptions{
			// Other users (a daemon under test running as its own
			// user) must reach the mount too.
			AllowOther: true,
			// Let the kernel enforce modes and owners, as a real
			// file system does, instead of the root daemon.
			Options: []string{"default_permissions"},
			FsName:  backing,
			Name:    fsName,
			// Root mounts with mount(2) itself; fusermount is only a
			// fallback for a non-root caller that has it installed.
			DirectMount:       true,
			DirectMountStrict: os.Geteuid() == 0,
			Debug:             opts.Debug,
			Logger:            opts.Logger,
		},
	}
	server, err := fuse.NewServer(fs.NewNodeFS(root, fsOpts), mountPoint, &fsOpts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("faultfs: mounting %s on %s: %w", backing, mountPoint, err)
	}
	f := &FS{
		gate:       g,
		backing:    backing,
		mountPoint: mountPoint,
		server:     server,
		served:     make(chan struct{}),
	}
	go func() {
		server.Serve()
		close(f.served)
	}()
	if err := server.WaitMount(); err != nil {
		_ = unix.Unmount(mountPoint, unix.MNT_DETACH)
		return nil, fmt.Errorf("faultfs: waiting for the kernel to initialise %s: %w", mountPoint, err)
	}
	entries, err := readMounts()
	if err == nil {
		e, ok := findMount(entries, mountPoint)
		if !ok || e.fsType != fsType {
			err = fmt.Errorf("faultfs: %s is not listed as a %s mount in /proc/self/mountinfo", mountPoint, fsType)
		} else {
			f.connID = connectionID(e)
		}
	}
	if err != nil {
		_ = f.Unmount()
		return nil, err
	}
	return f, nil
}

// Set switches the behaviour for every later request and for the
// requests waiting in Hang or Latency, which decide again under m: Set
// (Normal()) lets them through, Set(Stale()) fails them with ESTALE.
func (f *FS) Set(m Mode) { f.gate.set(m) }

// Mode returns the mode in effect.
func (f *FS) Mode() Mode { return f.gate.current() }

// Release ends a Hang (or Latency): it switches to Normal, so every
// waiting request proceeds to the backing directory, as when a stalled
// server comes back.
func (f *FS) Release() { f.gate.set(Normal()) }

// Blocked is the number of requests waiting in Hang or Latency right now.
// A test polls it (or calls WaitBlocked) to know that a process is stuck
// in the file system, instead of sleeping. Background requests that no
// process waits for (release, releasedir) count too.
func (f *FS) Blocked() int { return f.gate.blockedNow() }

// WaitBlocked returns once at least n requests are waiting in Hang or
// Latency, or with an error when ctx ends first.
func (f *FS) WaitBlocked(ctx context.Context, n int) error {
	return f.gate.waitBlocked(ctx, fmt.Sprintf("at least %d", n), func(b int) bool { return b >= n })
}

// WaitUnblocked returns once no request is waiting, or with an error when
// ctx ends first.
func (f *FS) WaitUnblocked(ctx context.Context) error {
	return f.gate.waitBlocked(ctx, "0", func(b int) bool { return b == 0 })
}

// Ops is the number of requests the FS has seen, faulted or not.
func (f *FS) Ops() uint64 { return f.gate.ops() }

// Count is the number of requests of one kind the FS has seen.
func (f *FS) Count(op Op) uint64 { return f.gate.count(op) }

// Interrupted is the number of waiting requests that the kernel
// interrupted (the caller got a signal) and that failed with EINTR.
func (f *FS) Interrupted() uint64 { return f.gate.interrupts() }

// Backing is the absolute path of the backing directory. Reading and
// writing it directly never goes through the FS, so a test may inspect it
// whatever the mode.
func (f *FS) Backing() string { return f.backing }

// MountPoint is the absolute path the FS is mounted on.
func (f *FS) MountPoint() string { return f.mountPoint }

// Done is closed once the kernel has dropped the FS for good: after
// Unmount, or after LazyUnmount once the last user has let go.
func (f *FS) Done() <-chan struct{} { return f.served }

// LazyUnmount detaches the mount with MNT_DETACH, as `umount -l` does:
// the mount point at once shows the directory underneath, while processes
// that hold files or a working directory inside keep using the FS until
// they let go, after which Done is closed. Unmount is still needed (and
// safe) for cleanup.
func (f *FS) LazyUnmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.detached {
		return fmt.Errorf("faultfs: %s is already unmounted", f.mountPoint)
	}
	if err := unix.Unmount(f.mountPoint, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("faultfs: lazy unmount of %s: %w", f.mountPoint, err)
	}
	f.detached = true
	return nil
}

// Unmount tears the FS down and waits until it is gone, whatever the mode
// or its users do. It first switches to Normal so that hung requests
// finish, then unmounts; if the mount stays busy it detaches it, gives
// remaining users drainGrace to let go, and finally aborts the FUSE
// connection through fusectl, which fails their requests with ENOTCONN.
// Calling it again, or after LazyUnmount, is safe.
func (f *FS) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate.set(Normal())
	if !f.detached {
		if err := f.unmountOrDetach(); err != nil {
			return err
		}
		f.detached = true
	}
	select {
	case <-f.served:
		return nil
	case <-time.After(drainGrace):
	}
	gone, err := f.abort()
	if err != nil {
		return err
	}
	select {
	case <-f.served:
		return nil
	case <-time.After(abortWait):
		what := "aborting"
		if gone {
			what = "the kernel dropped"
		}
		return fmt.Errorf("faultfs: FUSE server of %s still running %s after %s connection %d", f.mountPoint, abortWait, what, f.connID)
	}
}

// abort ends the connection unless Mount never learnt its id.
func (f *FS) abort() (gone bool, err error) {
	if f.connID == 0 {
		return false, fmt.Errorf("faultfs: %s is still served and its FUSE connection is unknown", f.mountPoint)
	}
	return abortConnection(f.connID)
}

func (f *FS) unmountOrDetach() error {
	deadline := time.Now().Add(unmountBusyFor)
	delay := 5 * time.Millisecond
	for {
		err := unix.Unmount(f.mountPoint, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINVAL):
			// No longer a mount point: someone unmounted it already.
			return nil
		case !errors.Is(err, unix.EBUSY):
			return fmt.Errorf("faultfs: unmounting %s: %w", f.mountPoint, err)
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(delay)
		delay = min(2*delay, 200*time.Millisecond)
	}
	if err := unix.Unmount(f.mountPoint, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("faultfs: detaching busy %s: %w", f.mountPoint, err)
	}
	return nil
}
