package engine

import (
	"context"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

const sharedFileName = "shared.dat"

func runSharedFile(ctx context.Context, rc *runContext) error {
	p := rc.cfg
	dirfd := rc.dir.fd
	if err := createFiles(dirfd, rc.dir.path(), sharedFileName); err != nil {
		return err
	}
	mode, err := chooseIOMode(dirfd, sharedFileName, p.BlockSize)
	if err != nil {
		return err
	}
	rc.result.Direct = mode.direct
	rc.result.Engine = probe.EngineSync
	bufs := workerBuffers(p.Workers, p.BlockSize, mode.align, rc.nonce)
	total := int64(p.Workers) * p.SegmentSize
	ops := total / p.BlockSize

	lat := newLatencyRecorder()
	secs, err := parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		return transfer(ctx, span{mode: mode, dirfd: dirfd, name: sharedFileName, write: true, off: int64(i) * p.SegmentSize, length: p.SegmentSize, blockSize: p.BlockSize, buf: bufs[i], nonce: rc.nonce, id: uint32(i)}, lat)
	})
	if err != nil {
		return err
	}
	rc.addOp("write", total, ops, secs, lat)

	lat = newLatencyRecorder()
	secs, err = parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		// IOR -C: read the segment of the next worker.
		other := (i + 1) % p.Workers
		return transfer(ctx, span{mode: mode, dirfd: dirfd, name: sharedFileName, off: int64(other) * p.SegmentSize, length: p.SegmentSize, blockSize: p.BlockSize, buf: bufs[i], nonce: rc.nonce, id: uint32(i)}, lat)
	})
	if err != nil {
		return err
	}
	rc.addOp("read", total, ops, secs, lat)
	return nil
}
