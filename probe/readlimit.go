package probe

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Limits on the files the daemon reads. Each is far above what a real file
// holds, and far below what would cost the daemon its memory: parsing
// YAML into nodes takes some 30 times the text, so a 100 MB baselines
// file took 3.2 GB of RSS and got the daemon OOM-killed on reload.
const (
	// MaxConfigBytes bounds the config file: the packaged one is 3 KB,
	// and a thousand targets of five probes each stay under 400 KB.
	MaxConfigBytes = 1 << 20
	// MaxBaselinesBytes bounds the baselines file: one probe's entry is
	// under 600 bytes, so 4 MiB holds several thousand probes.
	MaxBaselinesBytes = 4 << 20
	// MaxHistoryBytes bounds the history file: one probe op's entry with
	// its kept results is under 2 KB.
	MaxHistoryBytes = 8 << 20
)

// ErrFileTooLarge is the error of a file over its limit.
var ErrFileTooLarge = errors.New("file too large")

// ReadFileLimited reads a regular file of at most limit bytes. It opens
// without blocking and refuses anything that is not a regular file (a
// FIFO would hang the read, a device would never end), and reads at most
// limit+1 bytes, so a file that grows while read is refused too.
func ReadFileLimited(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, &os.PathError{Op: "read", Path: path, Err: unix.EISDIR}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file (mode %o)", path, st.Mode)
	}
	if st.Size > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, the limit is %d", path, ErrFileTooLarge, st.Size, limit)
	}
	// Back to blocking reads: a regular file never needs O_NONBLOCK, and
	// some file systems refuse reads with it.
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: over %d bytes", path, ErrFileTooLarge, limit)
	}
	return data, nil
}
