package probe

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// KindSequential is IOzone's N-to-N sequential test (-i0 -i1 -c -e): each
// worker writes its own file, fsyncs and closes it inside the timing, then
// reads it back.
const KindSequential = "sequential"

var sequentialKind = kindSpec{
	keys: []string{"workers", "file_size", "block_size"},
	ops:  []string{"write", "read"},
	setDefaults: func(p *ProbeConfig) {
		p.Workers = 1
		p.FileSize = 256 << 20
		p.BlockSize = 8 << 20
	},
	validate: func(p *ProbeConfig) []fieldError {
		var errs []fieldError
		errs = positive(p, "workers", int64(p.Workers), errs)
		if p.Workers > 256 {
			errs = append(errs, fieldError{"workers", "must be at most 256"})
		}
		errs = checkBlockSize(p.BlockSize, errs)
		if p.FileSize <= 0 || (p.BlockSize > 0 && p.FileSize%p.BlockSize != 0) {
			errs = append(errs, fieldError{"file_size", "must be a positive multiple of block_size"})
		}
		return errs
	},
	bytesPerRun: func(p *ProbeConfig) int64 { return 2 * int64(p.Workers) * p.FileSize },
	run:         runSequential,
}

func workerFileName(i int) string { return "w" + strconv.Itoa(i) + ".dat" }

func runSequential(ctx context.Context, rc *runContext) error {
	p := rc.cfg
	dirfd := rc.dir.fd
	// Create the files untimed, so the I/O mode can be read off a real file
	// on this file system before anything is measured.
	for i := 0; i < p.Workers; i++ {
		fd, err := unix.Openat(dirfd, workerFileName(i), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", rc.dir.path(), workerFileName(i), err)
		}
		unix.Close(fd)
	}
	mode, err := chooseIOMode(dirfd, workerFileName(0), p.BlockSize)
	if err != nil {
		return err
	}
	rc.result.Direct = mode.direct
	rc.result.Engine = "sync"

	bufs := make([][]byte, p.Workers)
	for i := range bufs {
		bufs[i] = alignedBuffer(int(p.BlockSize), mode.align)
		fillIncompressible(bufs[i], rc.nonce+uint64(i))
	}
	blocks := p.FileSize / p.BlockSize

	write := func(i int, lat *latencyRecorder) error {
		f, err := mode.openAt(dirfd, workerFileName(i), unix.O_WRONLY, 0)
		if err != nil {
			return err
		}
		buf := bufs[i]
		for b := int64(0); b < blocks; b++ {
			if err := ctx.Err(); err != nil {
				f.Close()
				return err
			}
			off := b * p.BlockSize
			stamp(buf, rc.nonce, uint32(i), off)
			t := time.Now()
			if _, err := f.WriteAt(buf, off); err != nil {
				f.Close()
				return fmt.Errorf("write %s: %w", f.Name(), err)
			}
			lat.Observe(time.Since(t).Seconds())
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("fsync %s: %w", f.Name(), err)
		}
		mode.dropCache(f)
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", f.Name(), err)
		}
		return nil
	}
	read := func(i int, lat *latencyRecorder) error {
		f, err := mode.openAt(dirfd, workerFileName(i), unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		mode.dropCache(f)
		buf := bufs[i]
		for b := int64(0); b < blocks; b++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			t := time.Now()
			if _, err := f.ReadAt(buf, b*p.BlockSize); err != nil {
				return fmt.Errorf("read %s: %w", f.Name(), err)
			}
			lat.Observe(time.Since(t).Seconds())
		}
		return f.Close()
	}

	total := int64(p.Workers) * p.FileSize
	ops := int64(p.Workers) * blocks
	for _, phase := range []struct {
		op string
		fn func(int, *latencyRecorder) error
	}{{"write", write}, {"read", read}} {
		lat := newLatencyRecorder()
		secs, err := parallel(p.Workers, lat, phase.fn)
		if err != nil {
			return err
		}
		rc.addOp(phase.op, total, ops, secs, lat)
	}
	return nil
}

// parallel runs fn for workers 0..n-1 at once and returns the wall time from
// the common start to the last finish, which is what an aggregate
// throughput must be divided by. The first error wins.
func parallel(n int, lat *latencyRecorder, fn func(int, *latencyRecorder) error) (float64, error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			errs[i] = fn(i, lat)
		}(i)
	}
	t := time.Now()
	close(start)
	wg.Wait()
	secs := time.Since(t).Seconds()
	for _, err := range errs {
		if err != nil {
			return secs, err
		}
	}
	return secs, nil
}
