package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// randomFileName is the file kept across runs in keep.<probe>.
const randomFileName = "random.dat"

// The permission bits of the kept file say whether its preallocation
// finished: it is written with mode 0200, which no finished file has, and
// set to 0600 only after the data is durable. A run killed at its timeout,
// or a crash, therefore never leaves a file that passes for complete, even
// when its size already matches; the size check alone would not catch a
// crash after the last write but before fsync.
const (
	randomFileIncomplete = 0o200
	randomFileComplete   = 0o600
)

// preallocChunk is the write size of the preallocation: large, so filling
// the file costs little next to the measured phases, yet bounded so one
// write never holds a slow file system for long.
const preallocChunk = 4 << 20

func runRandom(ctx context.Context, rc *runContext) error {
	return runRandomWith(ctx, rc, "")
}

// runRandomWith runs the probe with the given engine; "" picks libaio
// where the file takes O_DIRECT and the kernel allows AIO, goroutines
// otherwise. Tests and benchmarks name an engine to compare them; a named
// engine that cannot run is an error, not a fallback.
func runRandomWith(ctx context.Context, rc *runContext, engine string) (err error) {
	p := rc.cfg
	keep, err := rc.probeDir.openKeepDir(p.Name)
	if err != nil {
		return err
	}
	defer keep.Close()
	mode, err := prepareRandomFile(ctx, rc, keep)
	if err != nil {
		// A first run that could not write the file leaves no empty keep
		// directory either; rmdir refuses one that still holds anything.
		_ = unix.Unlinkat(rc.probeDir.fd, keep.name, unix.AT_REMOVEDIR)
		return err
	}
	rc.result.Direct = mode.direct
	f, err := mode.openAt(keep.fd, randomFileName, unix.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", keep.path(), err)
	}
	defer f.Close()
	fd := int(f.Fd())
	// The checks in prepareRandomFile looked at the name; what was opened
	// could have been swapped in since. Check the open file itself before
	// writing into it.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s/%s: %w", keep.path(), randomFileName, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Geteuid() || st.Size != p.FileSize {
		return fmt.Errorf("%w: %s/%s changed between its check and its open", probe.ErrUnsafe, keep.path(), randomFileName)
	}
	if !mode.direct {
		// Without O_DIRECT, readahead would fetch neighbours of each block
		// into the cache and flatter the next random reads.
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM)
	}

	bufs := make([][]byte, p.QueueDepth)
	for i := range bufs {
		bufs[i] = alignedBuffer(int(p.BlockSize), mode.align)
		fillIncompressible(bufs[i], rc.nonce+uint64(i))
	}

	forced := engine != ""
	if !forced {
		// Native AIO on a buffered file completes inside io_submit, so it
		// would keep only one request in flight.
		engine = probe.EngineGoroutines
		if mode.direct {
			engine = probe.EngineLibaio
		}
	}
	var aio *aioEngine
	if engine == probe.EngineLibaio {
		aio, err = newAIOEngine(bufs)
		switch {
		case err != nil && forced:
			return err
		case err != nil:
			engine = probe.EngineGoroutines
		default:
			defer func() {
				if cerr := aio.close(); cerr != nil && err == nil {
					err = cerr
				}
			}()
		}
	} else if engine != probe.EngineGoroutines {
		return fmt.Errorf("unknown random engine %q", engine)
	}

	for i, op := range []string{"read", "write"} {
		ph := &randomPhase{
			name:      keep.path() + "/" + randomFileName,
			fd:        fd,
			write:     op == "write",
			blocks:    p.FileSize / p.BlockSize,
			blockSize: p.BlockSize,
			duration:  p.Duration,
			nonce:     rc.nonce,
			seed:      rc.nonce ^ uint64(i+1)*0x9e3779b97f4a7c15,
			buffered:  !mode.direct,
		}
		lat := newLatencyRecorder()
		var n int64
		var secs float64
		if aio != nil {
			n, secs, err = aio.run(ctx, ph, lat)
			if errors.Is(err, errAIOUnsupported) && !forced {
				// Refused before anything was measured: rerun the phase
				// the portable way.
				if cerr := aio.close(); cerr != nil {
					return cerr
				}
				aio, engine = nil, probe.EngineGoroutines
				lat = newLatencyRecorder()
				n, secs, err = runGoroutines(ctx, ph, bufs, lat)
			}
		} else {
			n, secs, err = runGoroutines(ctx, ph, bufs, lat)
		}
		if err != nil {
			return err
		}
		rc.addOp(op, n*p.BlockSize, n, secs, lat)
	}
	rc.result.Engine = engine
	return nil
}

// randomPhase is one measured phase, read or write, over the kept file.
type randomPhase struct {
	name      string
	fd        int
	write     bool
	blocks    int64
	blockSize int64
	duration  time.Duration
	nonce     uint64
	// seed starts this phase's offset sequence; each request stream
	// derives its own from it.
	seed uint64
	// buffered is set when the file is not open with O_DIRECT.
	buffered bool
	writes   atomic.Uint64
}

func (ph *randomPhase) opName() string {
	if ph.write {
		return "write"
	}
	return "read"
}

// offset draws a block uniformly over the file, as fio's default
// random_distribution=random does.
func (ph *randomPhase) offset(rng *rand.Rand) int64 {
	return int64(rng.Uint64N(uint64(ph.blocks))) * ph.blockSize
}

// stampWrite makes each write of the phase unique, even two writes to the
// same block, so dedupe on the storage cannot absorb them.
func (ph *randomPhase) stampWrite(buf []byte, off int64) {
	seq := ph.writes.Add(1)
	stamp(buf, ph.nonce+seq*0x9e3779b97f4a7c15, 0, off)
}

// runGoroutines is the portable engine: one goroutine per request in
// flight, each doing pread or pwrite. Without O_DIRECT it keeps the reads
// honest by dropping each block from the page cache before reading it, and
// fsyncs the writes inside the phase time, as fio's end_fsync does.
func runGoroutines(ctx context.Context, ph *randomPhase, bufs [][]byte, lat *latencyRecorder) (int64, float64, error) {
	var stop atomic.Bool
	counts := make([]int64, len(bufs))
	errs := make([]error, len(bufs))
	var wg sync.WaitGroup
	begin := time.Now()
	timer := time.AfterFunc(ph.duration, func() { stop.Store(true) })
	defer timer.Stop()
	unwatch := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer unwatch()
	for i := range bufs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(ph.seed, uint64(i)+1))
			buf := bufs[i]
			var done int64
			defer func() { counts[i] = done }()
			for !stop.Load() {
				off := ph.offset(rng)
				if ph.write {
					ph.stampWrite(buf, off)
				} else if ph.buffered {
					_ = unix.Fadvise(ph.fd, off, int64(len(buf)), unix.FADV_DONTNEED)
				}
				t := time.Now()
				n, err := ph.transferAt(buf, off)
				if err == nil && n != len(buf) {
					err = fmt.Errorf("short transfer of %d of %d bytes", n, len(buf))
				}
				if err != nil {
					errs[i] = fmt.Errorf("%s %s at %d: %w", ph.opName(), ph.name, off, err)
					stop.Store(true)
					return
				}
				lat.Observe(time.Since(t).Seconds())
				done++
			}
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, time.Since(begin).Seconds(), err
	}
	if ph.write && ph.buffered {
		if err := unix.Fsync(ph.fd); err != nil {
			return 0, time.Since(begin).Seconds(), fmt.Errorf("fsync %s: %w", ph.name, err)
		}
	}
	secs := time.Since(begin).Seconds()
	if err := ctx.Err(); err != nil {
		return 0, secs, err
	}
	var total int64
	for _, c := range counts {
		total += c
	}
	return total, secs, nil
}

// transferAt is one pread or pwrite, retried when a signal interrupts it
// (NFS with intr, FUSE).
func (ph *randomPhase) transferAt(buf []byte, off int64) (int, error) {
	for {
		var n int
		var err error
		if ph.write {
			n, err = unix.Pwrite(ph.fd, buf, off)
		} else {
			n, err = unix.Pread(ph.fd, buf, off)
		}
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

// prepareRandomFile makes sure keep/random.dat is a complete file of
// file_size bytes, writing it when it is missing, of the wrong size, not
// a regular file, or left incomplete, and returns the I/O mode for it. A
// file with other links, or not ours, is replaced: a hard link planted
// there would otherwise make the write phase write into the file it
// shares an inode with, outside the probe directory.
func prepareRandomFile(ctx context.Context, rc *runContext, keep *keepDir) (ioMode, error) {
	p := rc.cfg
	var st unix.Stat_t
	err := unix.Fstatat(keep.fd, randomFileName, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && int(st.Uid) == os.Geteuid() &&
		st.Size == p.FileSize && st.Mode&0o777 == randomFileComplete:
		mode, err := chooseIOMode(keep.fd, randomFileName, p.BlockSize)
		if err != nil {
			return ioMode{}, fmt.Errorf("%s: %w", keep.path(), err)
		}
		return mode, nil
	case err == nil:
		// unlinkat removes a symlink itself, never its target.
		if err := unix.Unlinkat(keep.fd, randomFileName, 0); err != nil {
			return ioMode{}, fmt.Errorf("remove outdated %s/%s: %w", keep.path(), randomFileName, err)
		}
	case !errors.Is(err, unix.ENOENT):
		return ioMode{}, fmt.Errorf("stat %s/%s: %w", keep.path(), randomFileName, err)
	}
	return preallocateRandomFile(ctx, rc, keep)
}

// preallocateRandomFile writes the kept file whole with incompressible,
// stamped data and fsyncs it. It writes rather than fallocates: reads of
// unwritten extents return zeros without touching the media, which would
// flatter the random reads. Whatever goes wrong, the partial file is
// removed, so it neither takes space nor passes for complete.
func preallocateRandomFile(ctx context.Context, rc *runContext, keep *keepDir) (mode ioMode, err error) {
	p := rc.cfg
	path := keep.path() + "/" + randomFileName
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(keep.fd, &sfs); err != nil {
		return ioMode{}, fmt.Errorf("statfs %s: %w", keep.path(), err)
	}
	unit := int64(sfs.Frsize)
	if unit <= 0 {
		unit = int64(sfs.Bsize)
	}
	// Filling the file system to the last block would hurt its users more
	// than a failed probe; say so before writing anything.
	if avail := int64(sfs.Bavail) * unit; avail < p.FileSize {
		return ioMode{}, fmt.Errorf("preallocate %s: %s needed, %s available: %w", path, probe.FormatSize(p.FileSize), probe.FormatSize(avail), unix.ENOSPC)
	}
	fd, err := unix.Openat(keep.fd, randomFileName, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, randomFileComplete)
	if err != nil {
		return ioMode{}, fmt.Errorf("create %s: %w", path, err)
	}
	unix.Close(fd)
	defer func() {
		if err != nil {
			if rmErr := unlinkName(keep.fd, randomFileName, 0); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", keep.path(), rmErr))
			}
		}
	}()
	// The I/O mode is read off the new file while it is still readable:
	// the O_DIRECT open test needs read permission.
	mode, err = chooseIOMode(keep.fd, randomFileName, p.BlockSize)
	if err != nil {
		return ioMode{}, fmt.Errorf("%s: %w", keep.path(), err)
	}
	f, err := mode.openAt(keep.fd, randomFileName, unix.O_WRONLY, 0)
	if err != nil {
		return ioMode{}, fmt.Errorf("%s: %w", keep.path(), err)
	}
	defer f.Close()
	if err := f.Chmod(randomFileIncomplete); err != nil {
		return ioMode{}, fmt.Errorf("mark %s incomplete: %w", path, err)
	}

	chunk := max(1, preallocChunk/p.BlockSize) * p.BlockSize
	chunk = min(chunk, p.FileSize)
	buf := alignedBuffer(int(chunk), mode.align)
	fillIncompressible(buf, ^rc.nonce)
	begin := time.Now()
	var writes int64
	for off := int64(0); off < p.FileSize; {
		if err := ctx.Err(); err != nil {
			return ioMode{}, fmt.Errorf("preallocate %s: %w", path, err)
		}
		n := min(chunk, p.FileSize-off)
		stamp(buf[:n], rc.nonce, 0, off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return ioMode{}, fmt.Errorf("preallocate %s at %d: %w", path, off, err)
		}
		off += n
		writes++
	}
	if err := f.Sync(); err != nil {
		return ioMode{}, fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Chmod(randomFileComplete); err != nil {
		return ioMode{}, fmt.Errorf("mark %s complete: %w", path, err)
	}
	// The mode change is what declares the file valid; make it durable.
	if err := f.Sync(); err != nil {
		return ioMode{}, fmt.Errorf("fsync %s: %w", path, err)
	}
	mode.dropCache(f)
	if err := f.Close(); err != nil {
		return ioMode{}, fmt.Errorf("close %s: %w", path, err)
	}
	rc.addOp(probe.OpPrealloc, p.FileSize, writes, time.Since(begin).Seconds(), nil)
	return mode, nil
}
