package engine

import (
	"context"
	"strconv"
	"sync"
	"time"
)

func workerFileName(i int) string { return "w" + strconv.Itoa(i) + ".dat" }

func runSequential(ctx context.Context, rc *runContext) error {
	p := rc.cfg
	names := make([]string, p.Workers)
	for i := range names {
		names[i] = workerFileName(i)
	}
	mode, bufs, err := rc.syncFiles(names...)
	if err != nil {
		return err
	}
	total := int64(p.Workers) * p.FileSize
	err = rc.syncPhase(ctx, "write", total, bufs, func(i int) span {
		return span{mode: mode, dirfd: rc.dir.fd, name: names[i], write: true, length: p.FileSize}
	})
	if err != nil {
		return err
	}
	if p.ReadAfter > 0 {
		return coldRead(ctx, rc, mode, names, bufs)
	}
	return rc.syncPhase(ctx, "read", total, bufs, func(i int) span {
		return span{mode: mode, dirfd: rc.dir.fd, name: names[i], length: p.FileSize}
	})
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
