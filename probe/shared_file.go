package probe

import (
	"context"
)

// KindSharedFile is IOR's N-to-1 test (-a POSIX -e -C): workers write
// disjoint segments of one shared file in block_size transfers and fsync,
// then each reads back the segment another worker wrote, so no worker reads
// what its own cache holds.
const KindSharedFile = "shared_file"

const sharedFileName = "shared.dat"

var sharedFileKind = kindSpec{
	keys: []string{"workers", "block_size", "segment_size"},
	ops:  []string{"write", "read"},
	setDefaults: func(p *ProbeConfig) {
		p.Workers = 4
		p.BlockSize = 8 << 20
		p.SegmentSize = 64 << 20
	},
	validate: func(p *ProbeConfig) []fieldError {
		errs := checkWorkers(p, nil)
		errs = checkBlockSize(p.BlockSize, errs)
		if p.SegmentSize <= 0 || (p.BlockSize > 0 && p.SegmentSize%p.BlockSize != 0) {
			errs = append(errs, fieldError{"segment_size", "must be a positive multiple of block_size"})
		}
		return errs
	},
	bytesPerRun: func(p *ProbeConfig) int64 { return 2 * int64(p.Workers) * p.SegmentSize },
	run:         runSharedFile,
}

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
	rc.result.Engine = engineSync
	bufs := workerBuffers(p.Workers, p.BlockSize, mode.align, rc.nonce)
	total := int64(p.Workers) * p.SegmentSize
	ops := total / p.BlockSize

	lat := newLatencyRecorder()
	secs, err := parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		return transfer(ctx, mode, dirfd, sharedFileName, true, int64(i)*p.SegmentSize, p.SegmentSize, p.BlockSize, bufs[i], rc.nonce, uint32(i), lat)
	})
	if err != nil {
		return err
	}
	rc.addOp("write", total, ops, secs, lat)

	lat = newLatencyRecorder()
	secs, err = parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		// IOR -C: read the segment of the next worker.
		other := (i + 1) % p.Workers
		return transfer(ctx, mode, dirfd, sharedFileName, false, int64(other)*p.SegmentSize, p.SegmentSize, p.BlockSize, bufs[i], rc.nonce, uint32(i), lat)
	})
	if err != nil {
		return err
	}
	rc.addOp("read", total, ops, secs, lat)
	return nil
}
