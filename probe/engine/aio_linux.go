package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux native AIO (io_setup, io_submit, io_getevents, io_destroy) called
// as raw system calls, so the random probe keeps queue_depth requests in
// flight from one goroutine, as fio's libaio engine does, without cgo or
// libaio.so. A goroutine per request reaches only about 0.6 of fio's
// libaio at depth 16: every request then costs a thread hand-off in the
// Go scheduler on top of the system call.
//
// The structures mirror include/uapi/linux/aio_abi.h. struct iocb is 64
// bytes on every architecture: aio_buf and aio_nbytes are __u64 even on
// 32-bit kernels. The byte order only swaps aio_key and aio_rw_flags,
// which are both zero when submitted (the kernel writes aio_key itself,
// and this engine never reads it back), so one layout serves all.

// aioIocb is struct iocb; the fields this engine leaves zero are blank.
type aioIocb struct {
	data   uint64
	_      uint32 // aio_key (aio_rw_flags on big-endian)
	_      uint32 // aio_rw_flags (aio_key on big-endian)
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	buf    uint64
	nbytes uint64
	offset int64
	_      uint64 // aio_reserved2
	_      uint32 // aio_flags
	_      uint32 // aio_resfd
}

// aioEvent is struct io_event.
type aioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

// Compile-time checks that the Go layouts match the kernel's sizes.
var (
	_ [64 - unsafe.Sizeof(aioIocb{})]struct{}
	_ [unsafe.Sizeof(aioIocb{}) - 64]struct{}
	_ [32 - unsafe.Sizeof(aioEvent{})]struct{}
	_ [unsafe.Sizeof(aioEvent{}) - 32]struct{}
)

const (
	iocbCmdPread  = 0 // IOCB_CMD_PREAD
	iocbCmdPwrite = 1 // IOCB_CMD_PWRITE
)

// errAIOUnsupported reports that the file system refused native AIO on
// the very first request (EINVAL: no async read_iter/write_iter), before
// anything was measured, so the caller may rerun the phase another way.
var errAIOUnsupported = errors.New("native AIO not supported on this file")

// aioEngine owns one AIO context and the requests and buffers it uses.
// The kernel holds the addresses of iocbs and buffers while requests are
// in flight; they live in slices owned by the engine, which stays
// reachable (runtime.KeepAlive in close) until io_destroy has waited for
// every request, and Go's collector does not move heap objects.
type aioEngine struct {
	ctx    uintptr
	iocbs  []aioIocb
	bufs   [][]byte
	start  []time.Time
	events []aioEvent
	// pending lists requests (by index) waiting for the kernel to take
	// them: all of them when a phase starts, later those it refused with
	// EAGAIN.
	pending []int
	// submitted counts requests the kernel accepted over the engine's
	// life, to tell "AIO unsupported" (first request refused) from an
	// I/O error later.
	submitted int64
	closed    bool
}

// newAIOEngine sets up a context for len(bufs) requests in flight, one per
// buffer. It fails when the kernel has no AIO (ENOSYS), a seccomp filter
// forbids it (EPERM), or fs.aio-max-nr is exhausted (EAGAIN).
func newAIOEngine(bufs [][]byte) (*aioEngine, error) {
	e := &aioEngine{
		iocbs:   make([]aioIocb, len(bufs)),
		bufs:    bufs,
		start:   make([]time.Time, len(bufs)),
		events:  make([]aioEvent, len(bufs)),
		pending: make([]int, 0, len(bufs)),
	}
	_, _, errno := unix.Syscall(unix.SYS_IO_SETUP, uintptr(len(bufs)), uintptr(unsafe.Pointer(&e.ctx)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_setup(%d): %w", len(bufs), errno)
	}
	return e, nil
}

// close destroys the context. io_destroy blocks until every request in
// flight has completed, so no buffer is released while the kernel may
// still write into it.
func (e *aioEngine) close() error {
	if e == nil || e.closed {
		return nil
	}
	e.closed = true
	_, _, errno := unix.Syscall(unix.SYS_IO_DESTROY, e.ctx, 0, 0)
	runtime.KeepAlive(e)
	if errno != 0 {
		return fmt.Errorf("io_destroy: %w", errno)
	}
	return nil
}

// submitOne hands one request to the kernel. Requests go one per
// io_submit, as with fio's default iodepth_batch_submit=1: the block layer
// holds back (plugs) a batch of more than two until the call returns, so
// the device idles while the batch is built. Batched submission measured
// 0.71 of fio's write IOPS on a 2-CPU machine, one by one 0.92.
func (e *aioEngine) submitOne(r *aioIocb) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IO_SUBMIT, e.ctx, 1, uintptr(unsafe.Pointer(&r)))
		switch errno {
		case 0:
			e.submitted++
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}

// getEvents waits for at least one of n requests in flight to complete.
// It waits without a timeout, as fio does, because an hrtimer per wait
// costs at these rates and nothing but a completion can end the wait
// anyway: the buffers of requests in flight must outlive them, so neither
// the end of a phase nor the run's deadline can return before they
// complete. A request that never completes is the daemon's to kill.
func (e *aioEngine) getEvents(n int) ([]aioEvent, error) {
	got, _, errno := unix.Syscall6(unix.SYS_IO_GETEVENTS, e.ctx, 1, uintptr(n), uintptr(unsafe.Pointer(&e.events[0])), 0, 0)
	switch errno {
	case 0:
		return e.events[:got], nil
	case unix.EINTR:
		// The Go runtime's signals interrupt the wait; the caller simply
		// waits again.
		return nil, nil
	}
	return nil, fmt.Errorf("io_getevents: %w", errno)
}

// run keeps len(e.bufs) requests in flight against ph's file for
// ph.duration, then stops submitting and waits for what is in flight.
// Each request's latency runs from its io_submit to the io_getevents call
// that reaped it, as fio's total latency does. It returns the requests
// completed and the wall time from the first submit to the last
// completion.
func (e *aioEngine) run(ctx context.Context, ph *randomPhase, lat *latencyRecorder) (int64, float64, error) {
	rng := rand.New(rand.NewPCG(ph.seed, 0))
	opcode := uint16(iocbCmdPread)
	if ph.write {
		opcode = iocbCmdPwrite
	}
	var (
		done     int64
		inflight int
		stopping bool
		firstErr error
	)
	stop := func(err error) {
		stopping = true
		e.pending = e.pending[:0]
		if firstErr == nil {
			firstErr = err
		}
	}
	// submit sends request i to a new offset; false means the kernel did
	// not take it.
	submit := func(i int) bool {
		off := ph.offset(rng)
		if ph.write {
			ph.stampWrite(e.bufs[i], off)
		}
		e.iocbs[i] = aioIocb{
			data:   uint64(i),
			opcode: opcode,
			fildes: uint32(ph.fd),
			buf:    uint64(uintptrOf(e.bufs[i])),
			nbytes: uint64(len(e.bufs[i])),
			offset: off,
		}
		e.start[i] = time.Now()
		err := e.submitOne(&e.iocbs[i])
		switch {
		case err == nil:
			inflight++
			return true
		case errors.Is(err, unix.EAGAIN) && inflight > 0:
			// The kernel is short of resources; completions free them.
		case errors.Is(err, unix.EINVAL) && e.submitted == 0:
			stop(fmt.Errorf("io_submit: %w: %w", errAIOUnsupported, err))
		default:
			stop(fmt.Errorf("io_submit: %w", err))
		}
		return false
	}

	e.pending = e.pending[:0]
	for i := range e.bufs {
		e.pending = append(e.pending, i)
	}
	begin := time.Now()
	deadline := begin.Add(ph.duration)
	for {
		if !stopping {
			if ctx.Err() != nil {
				stop(ctx.Err())
			} else if !time.Now().Before(deadline) {
				stop(nil)
			}
		}
		sent := 0
		for _, i := range e.pending {
			if stopping || !submit(i) {
				break
			}
			sent++
		}
		if !stopping {
			e.pending = e.pending[:copy(e.pending, e.pending[sent:])]
		}
		if inflight == 0 {
			break
		}
		evs, err := e.getEvents(inflight)
		if err != nil {
			// Without completions nothing here can progress, and the
			// buffers must outlive the requests: close (io_destroy)
			// waits for them.
			return done, time.Since(begin).Seconds(), err
		}
		now := time.Now()
		for _, ev := range evs {
			inflight--
			i := int(ev.data)
			switch {
			case ev.res < 0:
				stop(fmt.Errorf("%s %s at %d: %w", ph.opName(), ph.name, e.iocbs[i].offset, unix.Errno(-ev.res)))
				continue
			case ev.res != int64(len(e.bufs[i])):
				stop(fmt.Errorf("%s %s at %d: short transfer of %d of %d bytes", ph.opName(), ph.name, e.iocbs[i].offset, ev.res, len(e.bufs[i])))
				continue
			}
			done++
			took := now.Sub(e.start[i])
			// Resubmit before the bookkeeping: the time a request spends
			// between completion and resubmission is queue depth lost.
			// Resubmitting only after the whole batch was reaped kept 12
			// of 16 requests in flight on average where fio keeps 16.
			switch {
			case stopping:
			case len(e.pending) > 0:
				// Earlier requests wait for the kernel; keep their order.
				e.pending = append(e.pending, i)
			case !submit(i) && !stopping:
				e.pending = append(e.pending, i)
			}
			lat.Observe(took.Seconds())
		}
	}
	return done, time.Since(begin).Seconds(), firstErr
}
