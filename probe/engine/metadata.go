package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// metadataWorker is one worker's directory and the names in it, prepared
// before any phase so that no phase's timing includes building strings:
// cnames are the names NUL-terminated for the kernel, which unix.Openat
// and unix.Unlinkat would otherwise allocate and copy on every call.
type metadataWorker struct {
	dirfd  int
	names  []string
	cnames []*byte
}

// metadataNames returns the names of worker w's files: "f" and the file's
// number, zero-padded to the length of the name mdtest gives the same file
// of the same task. mdtest -F -u -L -z 1 -b 1 -I n names task w's files
// file.mdtest.<w>.<i>, i from n to 2n-1 (the leaf directory's items are
// numbered after the n of the tree's root, which -L leaves empty): 18
// bytes for task 0 of -I 4096.
//
// The length is part of what is measured. A directory entry takes 8 bytes
// plus the name, rounded up to 4, and ext4 (like most file systems) scans a
// directory block entry by entry to look a name up and to find room for a
// new one: names of 2 to 5 bytes ("f0" ... "f4095", as this probe had)
// pack about 256 entries into a 4 KiB block instead of mdtest's 146, so every
// create scanned almost twice as many entries, and the probe created 12%
// fewer files per second than mdtest on the same ext4. With
// mdtest's lengths the directories have the same size and shape as
// mdtest's. The names stay "f" and digits, as the safety rules' list of
// generated names has them.
func metadataNames(w, files int) []string {
	names := make([]string, files)
	prefix := len("file.mdtest.") + len(strconv.Itoa(w)) + len(".")
	for j := range names {
		n := strconv.Itoa(j)
		pad := prefix + len(strconv.Itoa(files+j)) - len("f") - len(n)
		names[j] = "f" + strings.Repeat("0", max(pad, 0)) + n
	}
	return names
}

func runMetadata(ctx context.Context, rc *runContext) error {
	p := rc.cfg
	rc.result.Engine = probe.EngineSync
	workers := make([]metadataWorker, p.Workers)
	// The names depend on the worker only through the length of its
	// number: one list per length (at most three for 256 workers).
	namesByDigits := map[int][]string{}
	cnamesByDigits := map[int][]*byte{}
	defer func() {
		for _, w := range workers {
			if w.dirfd > 0 {
				unix.Close(w.dirfd)
			}
		}
	}()
	// mdtest -u: a unique directory per task, created before the timed phases.
	for i := range workers {
		// A Slurm task is one worker of many sharing the run directory:
		// firstWorker numbers its directory and names as that worker.
		i := i + rc.firstWorker
		d := "d" + strconv.Itoa(i)
		// A Slurm task running one phase after another's srun finds the
		// directory its create phase made.
		if err := unix.Mkdirat(rc.dir.fd, d, 0o700); err != nil && (rc.onlyOp == "" || rc.onlyOp == "create" || !errors.Is(err, unix.EEXIST)) {
			return fmt.Errorf("create %s/%s: %w", rc.dir.path(), d, err)
		}
		fd, err := unix.Openat(rc.dir.fd, d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s/%s: %w", rc.dir.path(), d, err)
		}
		digits := len(strconv.Itoa(i))
		if namesByDigits[digits] == nil {
			names := metadataNames(i, p.Files)
			cnames := make([]*byte, len(names))
			for j, n := range names {
				if cnames[j], err = unix.BytePtrFromString(n); err != nil {
					return err
				}
			}
			namesByDigits[digits], cnamesByDigits[digits] = names, cnames
		}
		workers[i-rc.firstWorker] = metadataWorker{dirfd: fd, names: namesByDigits[digits], cnames: cnamesByDigits[digits]}
	}
	var data []byte
	if p.FileSize > 0 {
		data = make([]byte, p.FileSize)
		fillIncompressible(data, rc.nonce)
	}

	phases := []struct {
		op string
		fn func(w *metadataWorker, j int, buf []byte) error
	}{
		{"create", func(w *metadataWorker, j int, _ []byte) error { return mdCreateAt(w.dirfd, w.cnames[j], data) }},
		{"stat", func(w *metadataWorker, j int, _ []byte) error { return mdStat(w.dirfd, w.names[j], p.FileSize) }},
		{"read", func(w *metadataWorker, j int, buf []byte) error {
			return mdReadAt(w.dirfd, w.cnames[j], p.FileSize, buf)
		}},
		{"remove", func(w *metadataWorker, j int, _ []byte) error { return mdRemoveAt(w.dirfd, w.cnames[j]) }},
	}
	bufs := make([][]byte, p.Workers)
	samples := make([][]time.Duration, p.Workers)
	for i := range bufs {
		bufs[i] = make([]byte, p.FileSize+1)
		samples[i] = make([]time.Duration, 0, p.Files)
	}
	for _, ph := range phases {
		if rc.onlyOp != "" && ph.op != rc.onlyOp {
			continue
		}
		done := make([]int64, p.Workers)
		began := time.Now()
		secs, err := parallel(p.Workers, nil, func(i int, _ *latencyRecorder) error {
			w := &workers[i]
			buf := bufs[i]
			// Latencies are kept raw and binned after the phase, so the
			// histogram's cost is not part of what is timed.
			lats := samples[i][:0]
			defer func() { samples[i] = lats }()
			for j, name := range w.names {
				if j&63 == 0 {
					if err := ctx.Err(); err != nil {
						return err
					}
					// A goroutine that only makes syscalls never passes
					// through the scheduler, so after 10ms the runtime's
					// sysmon takes it for one that hogs its P: it preempts
					// it and, as it is in a syscall most of the time, takes
					// the P from its thread and wakes another, over and
					// over. Those handoffs (futex wake-ups, thread switches)
					// cost about 10% more CPU per create than a C loop such
					// as mdtest's pays (2x the context switches; measured
					// on ext4 against mdtest). Yielding now and then, outside
					// the timed op, keeps the scheduler ticking; the
					// syscalls stay ordinary ones, so a hung mount still
					// releases the P and other workers run.
					runtime.Gosched()
				}
				t := time.Now()
				if err := ph.fn(w, j, buf); err != nil {
					return fmt.Errorf("%s d%d/%s: %w", ph.op, i, name, err)
				}
				lats = append(lats, time.Since(t))
				done[i]++
			}
			return nil
		})
		if err != nil {
			return err
		}
		lat := newLatencyRecorder()
		var ops int64
		for i, n := range done {
			ops += n
			for _, d := range samples[i] {
				lat.Observe(d.Seconds())
			}
		}
		bytes := int64(0)
		if ph.op == "create" || ph.op == "read" {
			bytes = ops * p.FileSize
		}
		rc.addOp(ph.op, bytes, ops, secs, lat)
		rc.spans = append(rc.spans, [2]time.Time{began, began.Add(time.Duration(secs * float64(time.Second)))})
	}
	return nil
}

// openat is unix.Openat on a name converted before the phase. It is an
// ordinary syscall (the runtime releases the P while it blocks), not a raw
// one: a hung mount must not hold a P, and more workers than Ps must still
// have their ops in flight at once.
func openat(dirfd int, name *byte, flags int, mode uint32) (int, error) {
	fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)), uintptr(flags|unix.O_LARGEFILE), uintptr(mode), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func mdCreate(dirfd int, name string, data []byte) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return mdCreateAt(dirfd, p, data)
}

func mdCreateAt(dirfd int, name *byte, data []byte) error {
	fd, err := openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		if _, err := unix.Write(fd, data); err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.Fsync(fd); err != nil {
			unix.Close(fd)
			return err
		}
	}
	return unix.Close(fd)
}

func mdStat(dirfd int, name string, size int64) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Size != size {
		return fmt.Errorf("size %d, want %d", st.Size, size)
	}
	return nil
}

func mdRead(dirfd int, name string, size int64, buf []byte) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return mdReadAt(dirfd, p, size, buf)
}

// mdReadAt opens the file, reads it to the end and closes it; an empty
// file is opened and closed only, as mdtest -e 0 does. buf is one byte
// longer than the file, so a file that grew is caught as well as a short
// one.
func mdReadAt(dirfd int, name *byte, size int64, buf []byte) error {
	fd, err := openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if size == 0 {
		return unix.Close(fd)
	}
	got := 0
	for {
		n, err := unix.Read(fd, buf[got:])
		if err != nil {
			unix.Close(fd)
			return err
		}
		got += n
		if n == 0 || got == len(buf) {
			break
		}
	}
	if int64(got) != size {
		unix.Close(fd)
		return fmt.Errorf("read %d bytes, want %d", got, size)
	}
	return unix.Close(fd)
}

func mdRemove(dirfd int, name string) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	return mdRemoveAt(dirfd, p)
}

func mdRemoveAt(dirfd int, name *byte) error {
	if _, _, errno := unix.Syscall(unix.SYS_UNLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)), 0); errno != 0 {
		return errno
	}
	return nil
}
