package faultfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// TestEveryOperationIsGated calls each FUSE operation of a node and a
// directory handle in Stale mode, without a mount: each must fail with
// ESTALE before touching the backing directory, and count exactly one
// request under its own name. A method that forgot the gate would fall
// through to the loopback, which has no backing path here.
func TestEveryOperationIsGated(t *testing.T) {
	g := newGate(Stale())
	n := &node{LoopbackNode: &fs.LoopbackNode{RootData: &fs.LoopbackRoot{Path: t.TempDir()}}, gate: g}
	d := &dir{inner: fs.NewListDirStream(nil), gate: g}
	ctx := context.Background()
	var (
		entry fuse.EntryOut
		attr  fuse.AttrOut
		statx fuse.StatxOut
		sfs   fuse.StatfsOut
		buf   = make([]byte, 16)
	)
	calls := []struct {
		op   Op
		call func() syscall.Errno
	}{
		{OpStatfs, func() syscall.Errno { return n.Statfs(ctx, &sfs) }},
		{OpLookup, func() syscall.Errno { _, e := n.Lookup(ctx, "x", &entry); return e }},
		{OpGetattr, func() syscall.Errno { return n.Getattr(ctx, nil, &attr) }},
		{OpStatx, func() syscall.Errno { return n.Statx(ctx, nil, 0, 0, &statx) }},
		{OpSetattr, func() syscall.Errno { return n.Setattr(ctx, nil, &fuse.SetAttrIn{}, &attr) }},
		{OpReadlink, func() syscall.Errno { _, e := n.Readlink(ctx); return e }},
		{OpSymlink, func() syscall.Errno { _, e := n.Symlink(ctx, "t", "x", &entry); return e }},
		{OpMknod, func() syscall.Errno { _, e := n.Mknod(ctx, "x", 0o644, 0, &entry); return e }},
		{OpMkdir, func() syscall.Errno { _, e := n.Mkdir(ctx, "x", 0o755, &entry); return e }},
		{OpUnlink, func() syscall.Errno { return n.Unlink(ctx, "x") }},
		{OpRmdir, func() syscall.Errno { return n.Rmdir(ctx, "x") }},
		{OpRename, func() syscall.Errno { return n.Rename(ctx, "x", n, "y", 0) }},
		{OpLink, func() syscall.Errno { _, e := n.Link(ctx, n, "x", &entry); return e }},
		{OpOpen, func() syscall.Errno { _, _, e := n.Open(ctx, syscall.O_RDONLY); return e }},
		{OpCreate, func() syscall.Errno { _, _, _, e := n.Create(ctx, "x", 0, 0o644, &entry); return e }},
		{OpTmpfile, func() syscall.Errno { _, _, _, e := n.Tmpfile(ctx, 0, 0o644, &entry); return e }},
		{OpRead, func() syscall.Errno { _, e := n.Read(ctx, nil, buf, 0); return e }},
		{OpWrite, func() syscall.Errno { _, e := n.Write(ctx, nil, buf, 0); return e }},
		{OpWrite, func() syscall.Errno { _, e := n.Writev(ctx, nil, [][]byte{buf, buf}, 0); return e }},
		{OpFlush, func() syscall.Errno { return n.Flush(ctx, nil) }},
		{OpFsync, func() syscall.Errno { return n.Fsync(ctx, nil, 0) }},
		{OpRelease, func() syscall.Errno { return n.Release(ctx, nil) }},
		{OpFallocate, func() syscall.Errno { return n.Allocate(ctx, nil, 0, 1, 0) }},
		{OpLseek, func() syscall.Errno { _, e := n.Lseek(ctx, nil, 0, 0); return e }},
		{OpCopyFileRange, func() syscall.Errno {
			_, e := n.CopyFileRange(ctx, nil, 0, n.EmbeddedInode(), nil, 0, 1, 0)
			return e
		}},
		{OpGetxattr, func() syscall.Errno { _, e := n.Getxattr(ctx, "user.x", buf); return e }},
		{OpSetxattr, func() syscall.Errno { return n.Setxattr(ctx, "user.x", buf, 0) }},
		{OpListxattr, func() syscall.Errno { _, e := n.Listxattr(ctx, buf); return e }},
		{OpRemovexattr, func() syscall.Errno { return n.Removexattr(ctx, "user.x") }},
		{OpOpendir, func() syscall.Errno { _, _, e := n.OpendirHandle(ctx, 0); return e }},
		{OpReaddir, func() syscall.Errno { _, e := n.Readdir(ctx); return e }},
		{OpReaddir, func() syscall.Errno { _, e := d.Readdirent(ctx); return e }},
		{OpFsyncdir, func() syscall.Errno { return d.Fsyncdir(ctx, 0) }},
		// Releasedir has no reply; the count proves it was gated.
		{OpReleasedir, func() syscall.Errno { d.Releasedir(ctx, 0); return syscall.ESTALE }},
	}
	seen := map[Op]bool{}
	for i, c := range calls {
		before := g.count(c.op)
		if e := c.call(); e != syscall.ESTALE {
			t.Errorf("call %d (%s) in stale mode: %v, want ESTALE", i, c.op, e)
		}
		if got := g.count(c.op) - before; got != 1 {
			t.Errorf("call %d (%s) counted %d requests, want 1", i, c.op, got)
		}
		if total := g.ops(); total != uint64(i+1) {
			t.Errorf("after call %d (%s): %d requests in total, want %d", i, c.op, total, i+1)
		}
		seen[c.op] = true
	}
	for _, op := range allOps() {
		if !seen[op] {
			t.Errorf("no call exercises %s", op)
		}
	}
}

// TestReleaseClosesOnFault: the kernel ignores a release's reply, so a
// faulted release must still close the backing descriptor, or every file
// closed during a fault would leak one in the test process.
func TestReleaseClosesOnFault(t *testing.T) {
	for _, m := range []Mode{Stale(), Normal()} {
		t.Run(m.String(), func(t *testing.T) {
			g := newGate(m)
			n := &node{LoopbackNode: &fs.LoopbackNode{RootData: &fs.LoopbackRoot{Path: t.TempDir()}}, gate: g}
			fd, err := syscall.Open(filepath.Join(t.TempDir(), "f"), syscall.O_CREAT|syscall.O_RDWR|syscall.O_CLOEXEC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			fh := &file{fs.NewLoopbackFile(fd)}
			want := syscall.Errno(0)
			if m == Stale() {
				want = syscall.ESTALE
			}
			if e := n.Release(context.Background(), fh); e != want {
				t.Errorf("release: %v, want %v", e, want)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
				syscall.Close(fd)
				t.Errorf("backing descriptor still open after release (fcntl: %v)", err)
			}
		})
	}
}

// TestReaddirGatedOncePerRequest: go-fuse asks for directory entries one
// at a time within a request; the fault applies per request, so a
// directory of many entries is delayed once, not once per entry.
func TestReaddirGatedOncePerRequest(t *testing.T) {
	g := newGate(Normal())
	entries := []fuse.DirEntry{{Name: "a", Mode: syscall.S_IFREG}, {Name: "b", Mode: syscall.S_IFREG}, {Name: "c", Mode: syscall.S_IFREG}}
	d := &dir{inner: fs.NewListDirStream(entries), gate: g}
	first := &fuse.Context{Cancel: make(chan struct{})}
	var names []string
	for range 2 {
		de, e := d.Readdirent(first)
		if e != 0 || de == nil {
			t.Fatalf("readdirent: %v, %v", de, e)
		}
		names = append(names, de.Name)
	}
	if g.count(OpReaddir) != 1 {
		t.Errorf("one request reading two entries counted %d readdirs", g.count(OpReaddir))
	}
	g.set(FailReadEIO())
	second := &fuse.Context{Cancel: make(chan struct{})}
	if _, e := d.Readdirent(second); e != syscall.EIO {
		t.Errorf("next request under %s: %v, want EIO", g.current(), e)
	}
	if g.count(OpReaddir) != 2 {
		t.Errorf("two requests counted %d readdirs", g.count(OpReaddir))
	}
	if names[0] != "a" || names[1] != "b" {
		t.Errorf("entries %q", names)
	}
}

func TestMountRejectsBadBacking(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, backing := range []string{filepath.Join(dir, "missing"), regular} {
		if f, err := Mount(backing, dir, Options{}); err == nil {
			_ = f.Unmount()
			t.Errorf("Mount(%q) succeeded", backing)
		}
	}
}
