package engine

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

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
	rc.result.Engine = probe.EngineSync
	bufs := workerBuffers(p.Workers, p.BlockSize, mode.align, rc.nonce)
	total := int64(p.Workers) * p.FileSize
	ops := total / p.BlockSize

	lat := newLatencyRecorder()
	secs, err := parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		return transfer(ctx, span{mode: mode, dirfd: dirfd, name: names[i], write: true, length: p.FileSize, blockSize: p.BlockSize, buf: bufs[i], nonce: rc.nonce, id: uint32(i)}, lat)
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
		return transfer(ctx, span{mode: mode, dirfd: dirfd, name: names[i], length: p.FileSize, blockSize: p.BlockSize, buf: bufs[i], nonce: rc.nonce, id: uint32(i)}, lat)
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
