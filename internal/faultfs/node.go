package faultfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a go-fuse loopback node whose every operation first passes the
// gate. The bridge prefers node methods (NodeReader, NodeWriter, ...) over
// file-handle methods, so implementing the file operations here as well
// puts every request through exactly one gate check.
type node struct {
	*fs.LoopbackNode
	gate *gate
	// directIO asks the kernel to bypass its page cache on every open.
	directIO bool
}

// file hides the loopback file handle from the bridge. The bare
// *fs.LoopbackFile offers PassthroughFd, and as root on a kernel with
// FUSE passthrough (6.9+) the bridge would then hand reads and writes to
// the kernel, which would never ask the daemon again: no fault could be
// injected. file implements no handle interface at all; node unwraps it.
type file struct {
	fs.FileHandle
}

// dir wraps a loopback directory stream so readdir, fsyncdir and
// releasedir pass the gate. It implements exactly the handle interfaces
// of the loopback stream that the bridge looks for.
type dir struct {
	inner fs.FileHandle
	gate  *gate
	// lastCtx is the request whose readdir already passed the gate. The
	// bridge calls Readdirent once per entry with one context per
	// request (holding the handle's lock), and a request must be
	// delayed or failed once, not once per entry.
	lastCtx context.Context
}

func unwrap(f fs.FileHandle) fs.FileHandle {
	if w, ok := f.(*file); ok {
		return w.FileHandle
	}
	if d, ok := f.(*dir); ok {
		return d.inner
	}
	return f
}

// The bridge finds operations by type assertion, so a missed method
// would silently fall through to the loopback and skip the gate.
var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeReader         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeWritever       = (*node)(nil)
	_ fs.NodeFlusher        = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeReleaser       = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeLseeker        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeReaddirer      = (*node)(nil)
	_ fs.FileReaddirenter   = (*dir)(nil)
	_ fs.FileSeekdirer      = (*dir)(nil)
	_ fs.FileFsyncdirer     = (*dir)(nil)
	_ fs.FileReleasedirer   = (*dir)(nil)
)

// WrapChild makes every node the loopback creates (lookup, create, mkdir,
// ...) a gated node too.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, gate: n.gate, directIO: n.directIO}
	}
	return ops
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if errno := n.gate.enter(ctx, OpStatfs, classOf(OpStatfs)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Statfs(ctx, out)
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpLookup, classOf(OpLookup)); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.gate.enter(ctx, OpGetattr, classOf(OpGetattr)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Getattr(ctx, unwrap(f), out)
}

func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.gate.enter(ctx, OpStatx, classOf(OpStatx)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Statx(ctx, unwrap(f), flags, mask, out)
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := n.gate.enter(ctx, OpSetattr, classOf(OpSetattr)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Setattr(ctx, unwrap(f), in, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpReadlink, classOf(OpReadlink)); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Readlink(ctx)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpSymlink, classOf(OpSymlink)); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpMknod, classOf(OpMknod)); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpMkdir, classOf(OpMkdir)); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if errno := n.gate.enter(ctx, OpUnlink, classOf(OpUnlink)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if errno := n.gate.enter(ctx, OpRmdir, classOf(OpRmdir)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if errno := n.gate.enter(ctx, OpRename, classOf(OpRename)); errno != 0 {
		return errno
	}
	// The loopback recognises its own nodes through an unexported
	// method that node inherits by embedding, so a gated parent works.
	return n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpLink, classOf(OpLink)); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Link(ctx, target, name, out)
}

func (n *node) openFlags(fuseFlags uint32) uint32 {
	if n.directIO {
		fuseFlags |= fuse.FOPEN_DIRECT_IO
	}
	return fuseFlags
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpOpen, classOf(OpOpen)|openClass(flags)); errno != 0 {
		return nil, 0, errno
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &file{fh}, n.openFlags(fuseFlags), 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpCreate, classOf(OpCreate)); errno != 0 {
		return nil, nil, 0, errno
	}
	ino, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ino, &file{fh}, n.openFlags(fuseFlags), 0
}

func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpTmpfile, classOf(OpTmpfile)); errno != 0 {
		return nil, nil, 0, errno
	}
	ino, fh, fuseFlags, errno := n.LoopbackNode.Tmpfile(ctx, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ino, &file{fh}, n.openFlags(fuseFlags), 0
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpRead, classOf(OpRead)); errno != 0 {
		return nil, errno
	}
	r, ok := unwrap(f).(fs.FileReader)
	if !ok {
		return nil, syscall.ENOTSUP
	}
	return r.Read(ctx, dest, off)
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpWrite, classOf(OpWrite)); errno != 0 {
		return 0, errno
	}
	w, ok := unwrap(f).(fs.FileWriter)
	if !ok {
		return 0, syscall.ENOTSUP
	}
	return w.Write(ctx, data, off)
}

// Writev exists because the bridge answers ENOSYS to a vectored write
// when the node has Write but not Writev.
func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpWrite, classOf(OpWrite)); errno != 0 {
		return 0, errno
	}
	inner := unwrap(f)
	if w, ok := inner.(fs.FileWritever); ok {
		return w.Writev(ctx, data, off)
	}
	w, ok := inner.(fs.FileWriter)
	if !ok {
		return 0, syscall.ENOTSUP
	}
	var joined []byte
	for _, b := range data {
		joined = append(joined, b...)
	}
	return w.Write(ctx, joined, off)
}

func (n *node) Flush(ctx context.Context, f fs.FileHandle) syscall.Errno {
	if errno := n.gate.enter(ctx, OpFlush, classOf(OpFlush)); errno != 0 {
		return errno
	}
	if fl, ok := unwrap(f).(fs.FileFlusher); ok {
		return fl.Flush(ctx)
	}
	return 0
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if errno := n.gate.enter(ctx, OpFsync, classOf(OpFsync)); errno != 0 {
		return errno
	}
	if s, ok := unwrap(f).(fs.FileFsyncer); ok {
		return s.Fsync(ctx, flags)
	}
	return syscall.ENOTSUP
}

// Release closes the backing descriptor whatever the verdict: the kernel
// ignores the reply to RELEASE (the caller's close has long returned), so
// a failed release would only leak the daemon's descriptor.
func (n *node) Release(ctx context.Context, f fs.FileHandle) syscall.Errno {
	errno := n.gate.enter(ctx, OpRelease, classOf(OpRelease))
	if r, ok := unwrap(f).(fs.FileReleaser); ok {
		if e := r.Release(ctx); errno == 0 {
			errno = e
		}
	}
	return errno
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if errno := n.gate.enter(ctx, OpFallocate, classOf(OpFallocate)); errno != 0 {
		return errno
	}
	if a, ok := unwrap(f).(fs.FileAllocater); ok {
		return a.Allocate(ctx, off, size, mode)
	}
	return syscall.ENOTSUP
}

func (n *node) Lseek(ctx context.Context, f fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpLseek, classOf(OpLseek)); errno != 0 {
		return 0, errno
	}
	if l, ok := unwrap(f).(fs.FileLseeker); ok {
		return l.Lseek(ctx, off, whence)
	}
	return 0, syscall.ENOTSUP
}

// CopyFileRange unwraps both handles: the loopback only copies between
// its own *fs.LoopbackFile handles.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpCopyFileRange, classOf(OpCopyFileRange)); errno != 0 {
		return 0, errno
	}
	return n.LoopbackNode.CopyFileRange(ctx, unwrap(fhIn), offIn, out, unwrap(fhOut), offOut, length, flags)
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpGetxattr, classOf(OpGetxattr)); errno != 0 {
		return 0, errno
	}
	return n.LoopbackNode.Getxattr(ctx, attr, dest)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if errno := n.gate.enter(ctx, OpSetxattr, classOf(OpSetxattr)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Setxattr(ctx, attr, data, flags)
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpListxattr, classOf(OpListxattr)); errno != 0 {
		return 0, errno
	}
	return n.LoopbackNode.Listxattr(ctx, dest)
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if errno := n.gate.enter(ctx, OpRemovexattr, classOf(OpRemovexattr)); errno != 0 {
		return errno
	}
	return n.LoopbackNode.Removexattr(ctx, attr)
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpOpendir, classOf(OpOpendir)); errno != 0 {
		return nil, 0, errno
	}
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dir{inner: fh, gate: n.gate}, fuseFlags, 0
}

// Readdir is not reached while OpendirHandle exists (the bridge prefers
// the latter), but it is gated so that no path bypasses the faults.
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if errno := n.gate.enter(ctx, OpReaddir, classOf(OpReaddir)); errno != 0 {
		return nil, errno
	}
	return n.LoopbackNode.Readdir(ctx)
}

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if ctx != d.lastCtx {
		if errno := d.gate.enter(ctx, OpReaddir, classOf(OpReaddir)); errno != 0 {
			return nil, errno
		}
		d.lastCtx = ctx
	}
	r, ok := d.inner.(fs.FileReaddirenter)
	if !ok {
		return nil, syscall.ENOTSUP
	}
	return r.Readdirent(ctx)
}

// Seekdir only happens inside a READDIR request, which Readdirent gates.
func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	s, ok := d.inner.(fs.FileSeekdirer)
	if !ok {
		return syscall.ENOTSUP
	}
	return s.Seekdir(ctx, off)
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if errno := d.gate.enter(ctx, OpFsyncdir, classOf(OpFsyncdir)); errno != 0 {
		return errno
	}
	s, ok := d.inner.(fs.FileFsyncdirer)
	if !ok {
		return syscall.ENOTSUP
	}
	return s.Fsyncdir(ctx, flags)
}

// Releasedir always closes the backing directory, like Release. go-fuse
// passes no cancellable context here, so a hung releasedir waits for the
// mode to change; no process waits on it.
func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	d.gate.enter(ctx, OpReleasedir, classOf(OpReleasedir))
	if r, ok := d.inner.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}
