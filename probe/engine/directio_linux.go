package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// ioMode is how a data probe moves bytes on one file system.
type ioMode struct {
	direct bool
	// align is the buffer and offset alignment O_DIRECT needs.
	align int
}

// defaultAlign is the alignment used where the file system names none.
const defaultAlign = probe.BlockAlign

// Memory-backed file systems accept O_DIRECT (tmpfs since Linux 6.6) but
// there is no device below them, so calling that "direct" would mislead.
var memoryFS = map[int64]string{unix.TMPFS_MAGIC: "tmpfs", unix.RAMFS_MAGIC: "ramfs"}

// chooseIOMode decides, on a freshly created probe file, whether O_DIRECT
// applies and with which alignment. STATX_DIOALIGN (Linux 6.1+) is the file
// system's own answer; where it is missing (older kernels, many network file
// systems) an O_DIRECT open is tried and EINVAL means no.
func chooseIOMode(dirfd int, name string, blockSize int64) (ioMode, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(dirfd, &sfs); err != nil {
		return ioMode{}, fmt.Errorf("statfs: %w", err)
	}
	if _, mem := memoryFS[int64(sfs.Type)]; mem {
		return ioMode{align: defaultAlign}, nil
	}
	var stx unix.Statx_t
	err := unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_DIOALIGN, &stx)
	if err == nil && stx.Mask&unix.STATX_DIOALIGN != 0 {
		if stx.Dio_offset_align == 0 {
			return ioMode{align: defaultAlign}, nil
		}
		align := max(int(stx.Dio_mem_align), int(stx.Dio_offset_align), defaultAlign)
		if blockSize%int64(align) != 0 {
			return ioMode{align: defaultAlign}, nil
		}
		return ioMode{direct: true, align: align}, nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			return ioMode{align: defaultAlign}, nil
		}
		return ioMode{}, fmt.Errorf("open %s: %w", name, err)
	}
	unix.Close(fd)
	return ioMode{direct: true, align: defaultAlign}, nil
}

// openFlags adds O_DIRECT when the mode uses it; O_NOFOLLOW always.
func (m ioMode) openFlags(flags int) int {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if m.direct {
		flags |= unix.O_DIRECT
	}
	return flags
}

// openAt opens a probe file relative to the run directory.
func (m ioMode) openAt(dirfd int, name string, flags int, perm uint32) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, m.openFlags(flags), perm)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// dropCache asks the kernel to forget a buffered file's pages so the next
// read goes to storage; it is how the buffered fallback avoids measuring RAM.
func (m ioMode) dropCache(f *os.File) {
	if !m.direct {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
}

// alignedBuffer returns a size-byte slice whose start is aligned.
func alignedBuffer(size, align int) []byte {
	raw := make([]byte, size+align)
	off := 0
	if rem := int(uintptrOf(raw) % uintptr(align)); rem != 0 {
		off = align - rem
	}
	return raw[off : off+size : off+size]
}

// stampChunk is the granularity at which data is made unique: dedupe and
// compression on storage (OneFS inline dedupe, ZFS) work on blocks of 4 KiB
// and up, so every 4 KiB carries its own offset and run nonce.
const stampChunk = 4096

// fillIncompressible fills buf with random bytes once per run.
func fillIncompressible(buf []byte, seed uint64) {
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24), byte(seed >> 32), byte(seed >> 40), byte(seed >> 48), byte(seed >> 56)})
	_, _ = rng.Read(buf)
}

// stamp writes the run nonce and the file offset into the head of every
// 4 KiB chunk, so no two blocks of a run, or of two runs, are equal.
func stamp(buf []byte, nonce uint64, fileID uint32, offset int64) {
	for i := 0; i+16 <= len(buf); i += stampChunk {
		binary.LittleEndian.PutUint64(buf[i:], nonce^uint64(fileID)<<48)
		binary.LittleEndian.PutUint64(buf[i+8:], uint64(offset)+uint64(i))
	}
}
