package engine

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// span is one worker's part of a data phase: a byte range of one file,
// moved in blockSize requests through buf.
type span struct {
	mode  ioMode
	dirfd int
	name  string
	write bool
	// off and length delimit the range; blockSize is each request's size.
	off, length, blockSize int64
	buf                    []byte
	// nonce and id (the worker) make every written block unique.
	nonce uint64
	id    uint32
	// progress, when set, is told after each request how many bytes of
	// the span are done.
	progress func(done int64)
}

// transfer moves the span, timing each request. Open and close, and on
// writes fsync, happen here so the caller's phase timing includes them, as
// IOzone -c -e and IOR -e do. Writes stamp every block so no two blocks are
// alike.
func transfer(ctx context.Context, sp span, lat *latencyRecorder) error {
	flags := unix.O_RDONLY
	if sp.write {
		flags = unix.O_WRONLY
	}
	f, err := sp.mode.openAt(sp.dirfd, sp.name, flags, 0)
	if err != nil {
		return err
	}
	if !sp.write {
		sp.mode.dropCache(f)
	}
	for pos := sp.off; pos < sp.off+sp.length; pos += sp.blockSize {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		t := time.Now()
		if sp.write {
			stamp(sp.buf, sp.nonce, sp.id, pos)
			_, err = f.WriteAt(sp.buf, pos)
		} else {
			_, err = f.ReadAt(sp.buf, pos)
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("%s %s at %d: %w", map[bool]string{true: "write", false: "read"}[sp.write], sp.name, pos, err)
		}
		lat.Observe(time.Since(t).Seconds())
		if sp.progress != nil {
			sp.progress(pos + sp.blockSize - sp.off)
		}
	}
	if sp.write {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("fsync %s: %w", sp.name, err)
		}
		sp.mode.dropCache(f)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", sp.name, err)
	}
	return nil
}

// createFiles creates empty files untimed, so the I/O mode can be read off
// a real file of this file system before anything is measured.
func createFiles(dirfd int, dirPath string, names ...string) error {
	for _, n := range names {
		fd, err := unix.Openat(dirfd, n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", dirPath, n, err)
		}
		unix.Close(fd)
	}
	return nil
}

// workerBuffers allocates one aligned, incompressible buffer per worker.
func workerBuffers(workers int, blockSize int64, align int, nonce uint64) [][]byte {
	bufs := make([][]byte, workers)
	for i := range bufs {
		bufs[i] = alignedBuffer(int(blockSize), align)
		fillIncompressible(bufs[i], nonce+uint64(i))
	}
	return bufs
}

// syncFiles creates the probe's files, decides on the first of them whether
// O_DIRECT holds, says so and the sync engine in the result, and gives each
// worker its buffer: the set-up of the data probes whose workers write and
// read with plain syscalls (sequential, shared_file).
func (rc *runContext) syncFiles(names ...string) (ioMode, [][]byte, error) {
	p := rc.cfg
	if err := createFiles(rc.dir.fd, rc.dir.path(), names...); err != nil {
		return ioMode{}, nil, err
	}
	mode, err := chooseIOMode(rc.dir.fd, names[0], p.BlockSize)
	if err != nil {
		return ioMode{}, nil, err
	}
	rc.result.Direct = mode.direct
	rc.result.Engine = probe.EngineSync
	return mode, workerBuffers(p.Workers, p.BlockSize, mode.align, rc.nonce), nil
}

// syncPhase runs op on every worker at once, worker i transferring the span
// at(i) places with its own buffer, and records the op: total bytes in
// blocks of the probe's size over the wall time of the slowest worker.
func (rc *runContext) syncPhase(ctx context.Context, op string, total int64, bufs [][]byte, at func(i int) span) error {
	p := rc.cfg
	lat := newLatencyRecorder()
	secs, err := parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		s := at(i)
		s.blockSize, s.buf, s.nonce, s.id = p.BlockSize, bufs[i], rc.nonce, uint32(i)
		return transfer(ctx, s, lat)
	})
	if err != nil {
		return err
	}
	rc.addOp(op, total, total/p.BlockSize, secs, lat)
	return nil
}
