package probe

import (
	"fmt"
	"time"
)

// The four probe kinds, modelled on the benchmarks the plateaus were
// measured with.
const (
	// KindSequential is IOzone's N-to-N sequential test (-i0 -i1 -c -e):
	// each worker writes its own file, fsyncs and closes it inside the
	// timing, then reads it back. With read_after, the read instead
	// measures files written by an earlier run at least that long ago,
	// which caches no longer hold.
	KindSequential = "sequential"
	// KindSharedFile is IOR's N-to-1 test (-a POSIX -e -C): workers write
	// disjoint segments of one shared file in block_size transfers and
	// fsync, then each reads back the segment another worker wrote, so no
	// worker reads what its own cache holds.
	KindSharedFile = "shared_file"
	// KindRandom is fio's randread and randwrite with direct=1: block_size
	// requests at aligned random offsets of one preallocated file,
	// queue_depth of them in flight, for duration each, reads first, then
	// writes.
	KindRandom = "random"
	// KindMetadata is mdtest's file test (-F -u -L -I files): each worker,
	// in its own directory, creates `files` files (empty, or file_size
	// bytes written and fsynced), stats them all, reads them all, removes
	// them all. Each op's rate is over its own phase alone.
	KindMetadata = "metadata"
)

// OpPrealloc reports the (re)creation of the random probe's kept file. It
// is not a measured phase of fio's test, but it is load the probe put on
// the file system, so it counts in plateau_probe_io_bytes_total and the I/O
// budget.
const OpPrealloc = "prealloc"

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
		errs = checkWholeBlocks(p.FileSize, p.BlockSize, "file_size", errs)
		if p.ReadAfter < 0 {
			errs = append(errs, fieldError{"read_after", "must not be negative"})
		}
		return errs
	},
	bytesPerRun: func(p *ProbeConfig) int64 { return 2 * int64(p.Workers) * p.FileSize },
}

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
		errs = checkWholeBlocks(p.SegmentSize, p.BlockSize, "segment_size", errs)
		return errs
	},
	bytesPerRun: func(p *ProbeConfig) int64 { return 2 * int64(p.Workers) * p.SegmentSize },
}

var randomKind = kindSpec{
	keys:      []string{"file_size", "block_size", "queue_depth", "duration"},
	ops:       []string{"read", "write"},
	ioOnlyOps: []string{OpPrealloc},
	setDefaults: func(p *ProbeConfig) {
		// 256MiB instead of the design's 1GiB example: every node keeps
		// this file on the shared file system (1000 nodes keep 256GiB),
		// and the first run writes it whole within the probe's timeout,
		// 26s even at a degraded 10MB/s. Targets behind large controller
		// caches should raise it past their share of the cache.
		p.FileSize = 256 << 20
		p.BlockSize = 4 << 10
		p.QueueDepth = 16
		p.Duration = 5 * time.Second
	},
	validate: validateRandom,
	// A duration-bound run moves what the storage can do in 2*duration,
	// which no config can tell; the scheduler charges the actual bytes
	// after the run. The pre-check asks for room to rewrite the kept file,
	// the largest amount a run moves regardless of the storage's speed.
	bytesPerRun: func(p *ProbeConfig) int64 { return p.FileSize },
}

func validateRandom(p *ProbeConfig) []fieldError {
	errs := checkBlockSize(p.BlockSize, nil)
	errs = checkWholeBlocks(p.FileSize, p.BlockSize, "file_size", errs)
	switch {
	case p.QueueDepth < 1 || p.QueueDepth > MaxQueueDepth:
		errs = append(errs, fieldError{"queue_depth", "must be between 1 and 1024"})
	case p.BlockSize > 0 && int64(p.QueueDepth)*p.BlockSize > MaxRandomBuffers:
		errs = append(errs, fieldError{"queue_depth", fmt.Sprintf("queue_depth × block_size must be at most %s (one buffer per request in flight)", FormatSize(MaxRandomBuffers))})
	}
	switch {
	case p.Duration <= 0:
		errs = append(errs, fieldError{"duration", "must be positive"})
	case p.Timeout > 0 && 2*p.Duration >= p.Timeout-SelfDeadlineMargin(p.Timeout):
		errs = append(errs, fieldError{"duration", fmt.Sprintf("the read and write phases (2 × %s) must end before the timeout %s less %s kept for clean-up", p.Duration, p.Timeout, SelfDeadlineMargin(p.Timeout))})
	}
	return errs
}

var metadataKind = kindSpec{
	keys: []string{"workers", "files", "file_size"},
	ops:  []string{"create", "stat", "read", "remove"},
	setDefaults: func(p *ProbeConfig) {
		p.Workers = 4
		p.Files = 1024
	},
	validate: func(p *ProbeConfig) []fieldError {
		errs := checkWorkers(p, nil)
		if p.Files <= 0 || p.Files > 1<<20 {
			errs = append(errs, fieldError{"files", "must be between 1 and 1048576"})
		}
		if p.FileSize < 0 || p.FileSize > 1<<20 {
			errs = append(errs, fieldError{"file_size", "must be between 0 and 1MiB for a metadata probe"})
		}
		return errs
	},
	bytesPerRun: func(p *ProbeConfig) int64 { return 2 * int64(p.Workers) * int64(p.Files) * p.FileSize },
}
