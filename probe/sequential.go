package probe

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// KindSequential is IOzone's N-to-N sequential test (-i0 -i1 -c -e): each
// worker writes its own file, fsyncs and closes it inside the timing, then
// reads it back. With read_after, the read instead measures files written
// by an earlier run at least that long ago, which caches no longer hold.
const KindSequential = "sequential"

var sequentialKind = kindSpec{
	keys: []string{"workers", "file_size", "block_size", "read_after"},
	ops:  []string{"write", "read"},
	setDefaults: func(p *ProbeConfig) {
		p.Workers = 1
		p.FileSize = 256 << 20
		p.BlockSize = 8 << 20
	},
	validate: func(p *ProbeConfig) []fieldError {
		errs := checkWorkers(p, nil)
		errs = checkBlockSize(p.BlockSize, errs)
		if p.FileSize <= 0 || (p.BlockSize > 0 && p.FileSize%p.BlockSize != 0) {
			errs = append(errs, fieldError{"file_size", "must be a positive multiple of block_size"})
		}
		if p.ReadAfter < 0 {
			errs = append(errs, fieldError{"read_after", "must not be negative"})
		}
		return errs
	},
	bytesPerRun: func(p *ProbeConfig) int64 { return 2 * int64(p.Workers) * p.FileSize },
	run:         runSequential,
}

func checkWorkers(p *ProbeConfig, errs []fieldError) []fieldError {
	if p.Workers <= 0 || p.Workers > 256 {
		errs = append(errs, fieldError{"workers", "must be between 1 and 256"})
	}
	return errs
}

func workerFileName(i int) string { return "w" + strconv.Itoa(i) + ".dat" }

func runSequential(ctx context.Context, rc *runContext) error {
	p := rc.cfg
	dirfd := rc.dir.fd
	names := make([]string, p.Workers)
	for i := range names {
		names[i] = workerFileName(i)
	}
	if err := createFiles(dirfd, rc.dir.path(), names...); err != nil {
		return err
	}
	mode, err := chooseIOMode(dirfd, names[0], p.BlockSize)
	if err != nil {
		return err
	}
	rc.result.Direct = mode.direct
	rc.result.Engine = engineSync
	bufs := workerBuffers(p.Workers, p.BlockSize, mode.align, rc.nonce)
	total := int64(p.Workers) * p.FileSize
	ops := total / p.BlockSize

	lat := newLatencyRecorder()
	secs, err := parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		return transfer(ctx, mode, dirfd, names[i], true, 0, p.FileSize, p.BlockSize, bufs[i], rc.nonce, uint32(i), lat)
	})
	if err != nil {
		return err
	}
	rc.addOp("write", total, ops, secs, lat)

	if p.ReadAfter > 0 {
		return coldRead(ctx, rc, mode, names, bufs)
	}
	lat = newLatencyRecorder()
	secs, err = parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		return transfer(ctx, mode, dirfd, names[i], false, 0, p.FileSize, p.BlockSize, bufs[i], rc.nonce, uint32(i), lat)
	})
	if err != nil {
		return err
	}
	rc.addOp("read", total, ops, secs, lat)
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
