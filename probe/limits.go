package probe

// Limits of the config, which a sweep must not exceed either.
const (
	// MaxWorkers bounds the workers of one probe (goroutines, open files).
	MaxWorkers = 256
	// MaxQueueDepth bounds the random probe's requests in flight.
	MaxQueueDepth = 1024
	// MaxRandomBuffers bounds the memory of a random run: queue_depth
	// buffers of block_size each.
	MaxRandomBuffers = 1 << 30
	// MaxBlockSize bounds one transfer of a data probe.
	MaxBlockSize = 1 << 30
	// BlockAlign is the alignment O_DIRECT needs of every transfer on the
	// file systems we know; block sizes must be multiples of it.
	BlockAlign = 4096
)

// fieldError is a validation problem with one key of a probe.
type fieldError struct {
	key string
	msg string
}

// checkBlockSize enforces what O_DIRECT needs of every data probe's transfers.
func checkBlockSize(bs int64, errs []fieldError) []fieldError {
	if bs <= 0 || bs%BlockAlign != 0 {
		return append(errs, fieldError{"block_size", "must be a positive multiple of 4KiB (O_DIRECT alignment)"})
	}
	if bs > MaxBlockSize {
		return append(errs, fieldError{"block_size", "must be at most 1GiB"})
	}
	return errs
}

// checkWholeBlocks enforces that a data probe's file or segment of size
// bytes, the key named key, is moved in whole blocks of the block size.
func checkWholeBlocks(size, blockSize int64, key string, errs []fieldError) []fieldError {
	if size <= 0 || (blockSize > 0 && size%blockSize != 0) {
		errs = append(errs, fieldError{key, "must be a positive multiple of block_size"})
	}
	return errs
}

func checkWorkers(p *ProbeConfig, errs []fieldError) []fieldError {
	if p.Workers <= 0 || p.Workers > MaxWorkers {
		errs = append(errs, fieldError{"workers", "must be between 1 and 256"})
	}
	return errs
}
