package engine

import "context"

const sharedFileName = "shared.dat"

func runSharedFile(ctx context.Context, rc *runContext) error {
	p := rc.cfg
	mode, bufs, err := rc.syncFiles(sharedFileName)
	if err != nil {
		return err
	}
	total := int64(p.Workers) * p.SegmentSize
	err = rc.syncPhase(ctx, "write", total, bufs, func(i int) span {
		return span{mode: mode, dirfd: rc.dir.fd, name: sharedFileName, write: true, off: int64(i) * p.SegmentSize, length: p.SegmentSize}
	})
	if err != nil {
		return err
	}
	return rc.syncPhase(ctx, "read", total, bufs, func(i int) span {
		// IOR -C: read the segment of the next worker.
		other := (i + 1) % p.Workers
		return span{mode: mode, dirfd: rc.dir.fd, name: sharedFileName, off: int64(other) * p.SegmentSize, length: p.SegmentSize}
	})
}
