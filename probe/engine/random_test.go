package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// smallRandom is a random probe light enough for unit tests: an 8MiB file,
// 4KiB requests, 16 in flight, 300ms per phase.
func smallRandom(name string) probe.ProbeConfig {
	return probe.ProbeConfig{Name: name, Kind: probe.KindRandom, FileSize: 8 << 20, BlockSize: 4 << 10, QueueDepth: 16, Duration: 300 * time.Millisecond, Interval: time.Minute, Timeout: 30 * time.Second}
}

func keptRandomFile(target, probe string) string {
	return filepath.Join(target, "node1", keepDirPrefix+probe, randomFileName)
}

// keptAfterARun runs p once on target, which must succeed, and returns the
// path of the file the run keeps for the next one.
func keptAfterARun(t *testing.T, target string, p probe.ProbeConfig) string {
	t.Helper()
	if res := Execute(context.Background(), probefixture.Request(target, p)); !res.OK() {
		t.Fatalf("%s: %s", res.Reason, res.Error)
	}
	return keptRandomFile(target, p.Name)
}

// keptState is what must survive between runs: the same inode, the full
// size, and the permission bits that mark a finished preallocation.
type keptState struct {
	ino  uint64
	size int64
	perm os.FileMode
}

func statKept(t *testing.T, path string) keptState {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Fatalf("%s is %v, not a regular file", path, fi.Mode())
	}
	return keptState{ino: fi.Sys().(*syscall.Stat_t).Ino, size: fi.Size(), perm: fi.Mode().Perm()}
}

// runRandomEngine runs the random probe as Execute does, but with a named
// engine, so both engines are tested whatever this file system supports.
func runRandomEngine(ctx context.Context, t testing.TB, target string, p probe.ProbeConfig, engine string) *probe.Result {
	t.Helper()
	dir, err := openProbeDir(target, "node1", false)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	run, err := dir.newRunDir(p.Name)
	if err != nil {
		t.Fatal(err)
	}
	res := &probe.Result{Target: "t", Probe: p.Name, Kind: p.Kind}
	rc := &runContext{cfg: &p, probeDir: dir, dir: run, result: res, nonce: rand.Uint64()}
	err = runRandomWith(ctx, rc, engine)
	if rmErr := run.remove(); rmErr != nil {
		t.Errorf("remove run directory: %v", rmErr)
	}
	if err != nil {
		res.Fail(err)
	}
	return res
}

// checkRandomPhases verifies what every successful run must report.
func checkRandomPhases(t *testing.T, res *probe.Result, p probe.ProbeConfig) {
	t.Helper()
	eachMeasuredOp(t, res, []string{"read", "write"}, func(op string, o *probe.OpResult) {
		if o.Operations <= 0 || o.OperationsPerSecond() <= 0 {
			t.Errorf("%s: no operations measured: %+v", op, o)
		}
		if o.Bytes != o.Operations*p.BlockSize {
			t.Errorf("%s: %d bytes for %d operations of %d", op, o.Bytes, o.Operations, p.BlockSize)
		}
		// A phase submits for its whole duration and then waits for what
		// is in flight, so it cannot be shorter.
		if o.Seconds < p.Duration.Seconds() {
			t.Errorf("%s: phase lasted %.3fs, shorter than its duration %s", op, o.Seconds, p.Duration)
		}
	})
	if i, j := opIndex(res, "read"), opIndex(res, "write"); i > j {
		t.Errorf("read phase must come first (it reads only blocks the preallocation wrote): %+v", res.Ops)
	}
}

func opIndex(res *probe.Result, op string) int {
	for i, o := range res.Ops {
		if o.Op == op {
			return i
		}
	}
	return -1
}

func TestRandomKeepsItsFileAcrossRuns(t *testing.T) {
	target := t.TempDir()
	p := smallRandom("r")
	first := Execute(context.Background(), probefixture.Request(target, p))
	checkRandomPhases(t, first, p)
	pre := first.Op(probe.OpPrealloc)
	if pre == nil || pre.Bytes != p.FileSize || pre.Operations != 2 {
		t.Fatalf("first run must preallocate %d bytes in two 4MiB writes: %+v", p.FileSize, pre)
	}
	// libaio on a buffered file would complete inside io_submit, so it is
	// chosen exactly when the file takes O_DIRECT.
	if want := map[bool]string{true: probe.EngineLibaio, false: probe.EngineGoroutines}[first.Direct]; first.Engine != want {
		t.Errorf("direct=%v ran engine %q, want %q", first.Direct, first.Engine, want)
	}
	t.Logf("direct=%v engine=%s: read %.0f IOPS, write %.0f IOPS", first.Direct, first.Engine, first.Op("read").OperationsPerSecond(), first.Op("write").OperationsPerSecond())
	path := keptRandomFile(target, p.Name)
	before := statKept(t, path)
	if before.size != p.FileSize || before.perm != randomFileComplete {
		t.Fatalf("kept file = %+v, want %d bytes, mode %o", before, p.FileSize, randomFileComplete)
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 1 || left[0] != keepDirPrefix+p.Name {
		t.Errorf("probe directory holds %v, want only the keep directory", left)
	}

	second := Execute(context.Background(), probefixture.Request(target, p))
	checkRandomPhases(t, second, p)
	if o := second.Op(probe.OpPrealloc); o != nil {
		t.Errorf("second run preallocated again: %+v", o)
	}
	if after := statKept(t, path); after != before {
		t.Errorf("kept file changed identity or size: %+v, then %+v", before, after)
	}
}

func TestRandomRecreatesAnUnusableFile(t *testing.T) {
	p := smallRandom("r")
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, path string)
	}{
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, p.FileSize/2); err != nil {
				t.Fatal(err)
			}
		}},
		{"grown", func(t *testing.T, path string) {
			if err := os.Truncate(path, p.FileSize+p.BlockSize); err != nil {
				t.Fatal(err)
			}
		}},
		// Full size but still marked incomplete: a preallocation killed
		// between its last write and its fsync.
		{"interrupted", func(t *testing.T, path string) {
			if err := os.Chmod(path, randomFileIncomplete); err != nil {
				t.Fatal(err)
			}
		}},
		{"missing", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := t.TempDir()
			path := keptAfterARun(t, target, p)
			tc.spoil(t, path)
			res := Execute(context.Background(), probefixture.Request(target, p))
			checkRandomPhases(t, res, p)
			if o := res.Op(probe.OpPrealloc); o == nil || o.Bytes != p.FileSize {
				t.Errorf("a %s file must be written again: %+v", tc.name, o)
			}
			if st := statKept(t, path); st.size != p.FileSize || st.perm != randomFileComplete {
				t.Errorf("re-created file = %+v", st)
			}
		})
	}
}

// A symlink planted where the kept file belongs is removed, never followed:
// the file it points to stays as it was.
func TestRandomReplacesASymlinkWithoutFollowingIt(t *testing.T) {
	target := t.TempDir()
	p := smallRandom("r")
	path := keptAfterARun(t, target, p)
	outside, unchanged := outsideFile(t)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, path); err != nil {
		t.Fatal(err)
	}
	res := Execute(context.Background(), probefixture.Request(target, p))
	checkRandomPhases(t, res, p)
	unchanged()
	if st := statKept(t, path); st.size != p.FileSize {
		t.Errorf("kept file = %+v", st)
	}
}

func TestRandomEnginesBothMeasure(t *testing.T) {
	target := t.TempDir()
	p := smallRandom("r")
	p.QueueDepth = 8
	for _, engine := range []string{probe.EngineLibaio, probe.EngineGoroutines} {
		t.Run(engine, func(t *testing.T) {
			res := runRandomEngine(context.Background(), t, target, p, engine)
			checkRandomPhases(t, res, p)
			if res.Engine != engine {
				t.Errorf("engine label %q, want %q", res.Engine, engine)
			}
			t.Logf("%s, direct=%v: read %.0f IOPS, write %.0f IOPS", engine, res.Direct, res.Op("read").OperationsPerSecond(), res.Op("write").OperationsPerSecond())
		})
	}
	if _, err := os.Stat(keptRandomFile(target, p.Name)); err != nil {
		t.Fatal(err)
	}
	if res := runRandomEngine(context.Background(), t, target, p, "sync"); res.OK() || !strings.Contains(res.Error, `unknown random engine "sync"`) {
		t.Errorf("an unknown engine must fail the run: %+v", res)
	}
}

// The run's self-deadline stops both engines mid-phase: they stop
// submitting, wait for what is in flight and report a timeout, long before
// the phase would have ended; the kept file stays complete.
func TestRandomStopsAtTheDeadline(t *testing.T) {
	target := t.TempDir()
	p := smallRandom("r")
	path := keptAfterARun(t, target, p)
	before := statKept(t, path)
	p.Duration = time.Minute
	p.Timeout = 5 * time.Minute
	for _, engine := range []string{probe.EngineLibaio, probe.EngineGoroutines} {
		t.Run(engine, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			res := runRandomEngine(ctx, t, target, p, engine)
			if res.Reason != probe.ReasonTimeout {
				t.Fatalf("reason %q (%s), want timeout", res.Reason, res.Error)
			}
			if took := time.Since(start); took > p.Duration/2 {
				t.Errorf("stopping took %s: the deadline was not noticed during the phase", took)
			}
			if after := statKept(t, path); after != before {
				t.Errorf("kept file changed: %+v, then %+v", before, after)
			}
		})
	}
}

// A preallocation cut short by the deadline leaves nothing behind that a
// later run could take for a complete file.
func TestRandomTimeoutDuringPreallocationRemovesTheFile(t *testing.T) {
	target := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := Execute(ctx, probefixture.Request(target, smallRandom("r")))
	if res.Reason != probe.ReasonTimeout {
		t.Fatalf("cancelled run: reason %q (%s), want timeout", res.Reason, res.Error)
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
		t.Errorf("cancelled first run left %v behind", left)
	}
}

// A file that cannot fit fails with enospc before a byte is written.
func TestRandomRefusesAFileThatCannotFit(t *testing.T) {
	target := t.TempDir()
	p := smallRandom("r")
	p.FileSize = 1 << 50
	res := Execute(context.Background(), probefixture.Request(target, p))
	if res.Reason != probe.ReasonENOSPC || !strings.Contains(res.Error, "1024TiB needed") {
		t.Fatalf("reason %q (%s), want enospc", res.Reason, res.Error)
	}
	if left := probetest.ProbeDirEntries(t, target); len(left) != 0 {
		t.Errorf("refused run left %v behind", left)
	}
}

func TestRandomConfig(t *testing.T) {
	parse := func(yamlProbe string) (*probe.ProbeConfig, error) {
		cfg, err := probe.ParseConfig([]byte("defaults: {timeout: 1m}\ntargets:\n  - name: t\n    path: /tmp\n    probes:\n      - "+yamlProbe+"\n"), "c.yml")
		if err != nil {
			return nil, err
		}
		return cfg.Targets[0].Probes[0], nil
	}
	p, err := parse("{name: r, kind: random}")
	if err != nil {
		t.Fatal(err)
	}
	if p.FileSize != 256<<20 || p.BlockSize != 4<<10 || p.QueueDepth != 16 || p.Duration != 5*time.Second {
		t.Errorf("defaults = %+v", p)
	}
	if probe.BytesPerRun(p) != p.FileSize {
		t.Errorf("budget pre-check = %d, want the file size", probe.BytesPerRun(p))
	}
	p, err = parse("{name: r, kind: random, file_size: 1GiB, block_size: 8KiB, queue_depth: 64, duration: 20s}")
	if err != nil || p.FileSize != 1<<30 || p.BlockSize != 8<<10 || p.QueueDepth != 64 || p.Duration != 20*time.Second {
		t.Errorf("explicit keys = %+v, %v", p, err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"{name: r, kind: random, queue_depth: 0}", "queue_depth: must be between 1 and 1024"},
		{"{name: r, kind: random, queue_depth: 1025}", "queue_depth: must be between 1 and 1024"},
		{"{name: r, kind: random, queue_depth: 1024, block_size: 2MiB}", "queue_depth: queue_depth × block_size must be at most 1GiB"},
		{"{name: r, kind: random, file_size: 10KiB, block_size: 4KiB}", "file_size: must be a positive multiple of block_size"},
		{"{name: r, kind: random, block_size: 1000}", "block_size: must be a positive multiple of 4KiB"},
		{"{name: r, kind: random, duration: 0s}", "duration: must be positive"},
		// 2 × 29s leaves less than the 2s the run keeps for clean-up.
		{"{name: r, kind: random, duration: 29s}", "duration: the read and write phases (2 × 29s) must end before the timeout 1m0s less 2s"},
		{"{name: r, kind: random, workers: 2}", `workers: does not apply to kind "random"`},
	} {
		_, err := parse(tc.yaml)
		if err == nil || !strings.Contains(err.Error(), "c.yml:6: targets[0].probes[0]."+tc.want) {
			t.Errorf("%s: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := parse("{name: r, kind: random, duration: 28s}"); err != nil {
		t.Errorf("2 × 28s fits a 1m timeout: %v", err)
	}
}

// Offsets must be block-aligned (O_DIRECT refuses others) and inside the
// file, whatever the sizes and seed.
func FuzzRandomOffsets(f *testing.F) {
	f.Add(uint64(8<<20), uint64(4096), uint64(1))
	f.Add(uint64(256<<20), uint64(4096), uint64(0))
	f.Add(uint64(4096), uint64(4096), uint64(42))
	f.Add(uint64(12<<10), uint64(12<<10), uint64(7))
	f.Fuzz(func(t *testing.T, fileSize, blockSize, seed uint64) {
		if blockSize == 0 || blockSize > 1<<30 || fileSize < blockSize || fileSize > 1<<50 {
			t.Skip()
		}
		fileSize -= fileSize % blockSize
		ph := &randomPhase{blocks: int64(fileSize / blockSize), blockSize: int64(blockSize)}
		rng := rand.New(rand.NewPCG(seed, 0))
		for range 64 {
			off := ph.offset(rng)
			if off < 0 || uint64(off)%blockSize != 0 || uint64(off)+blockSize > fileSize {
				t.Fatalf("offset %d for %d-byte blocks in a %d-byte file", off, blockSize, fileSize)
			}
		}
	})
}

// Uniform offsets reach the whole file: in 64 blocks with 64000 draws,
// every block is hit and none takes more than twice its share.
func TestRandomOffsetsCoverTheFile(t *testing.T) {
	ph := &randomPhase{blocks: 64, blockSize: 4096}
	rng := rand.New(rand.NewPCG(1, 2))
	hits := make([]int, ph.blocks)
	for range 64000 {
		hits[ph.offset(rng)/4096]++
	}
	for b, n := range hits {
		if n == 0 || n > 2000 {
			t.Errorf("block %d drawn %d times of 64000", b, n)
		}
	}
}

// Every write of a phase carries different data, even to the same block.
func TestRandomWritesAreUnique(t *testing.T) {
	ph := &randomPhase{nonce: 5}
	buf := alignedBuffer(8192, 4096)
	fillIncompressible(buf, 1)
	seen := map[string]bool{}
	for range 1000 {
		ph.stampWrite(buf, 4096)
		if seen[string(buf)] {
			t.Fatal("two writes to one block carried the same data")
		}
		seen[string(buf)] = true
	}
}

// BenchmarkRandomEngines compares the engines at fio's depth 16 on the
// temp directory's file system; run with -benchtime=1x, each iteration is
// a 2s read and a 2s write phase.
func BenchmarkRandomEngines(b *testing.B) {
	target := b.TempDir()
	p := smallRandom("bench")
	p.FileSize = 256 << 20
	p.Duration = 2 * time.Second
	p.Timeout = time.Minute
	if res := runRandomEngine(context.Background(), b, target, p, ""); !res.OK() {
		b.Fatalf("%s: %s", res.Reason, res.Error)
	}
	for _, engine := range []string{probe.EngineLibaio, probe.EngineGoroutines} {
		b.Run(engine, func(b *testing.B) {
			var reads, writes, rsecs, wsecs float64
			direct := false
			for b.Loop() {
				res := runRandomEngine(context.Background(), b, target, p, engine)
				if !res.OK() {
					b.Fatalf("%s: %s", res.Reason, res.Error)
				}
				direct = res.Direct
				reads += float64(res.Op("read").Operations)
				rsecs += res.Op("read").Seconds
				writes += float64(res.Op("write").Operations)
				wsecs += res.Op("write").Seconds
			}
			b.ReportMetric(reads/rsecs, "read-IOPS")
			b.ReportMetric(writes/wsecs, "write-IOPS")
			b.Logf("direct=%v", direct)
		})
	}
}

// The engines' error paths, driven by real descriptors the kernel refuses.
func TestRandomEngineErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, randomFileName)
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	open := func(flag int) int {
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	bufs := [][]byte{alignedBuffer(4096, 4096), alignedBuffer(4096, 4096)}
	for _, tc := range []struct {
		name string
		ph   *randomPhase
		// aio and sync are what each engine must report.
		aio, sync func(error) bool
	}{
		// A directory has no read_iter: AIO refuses the first request,
		// which is what lets the run fall back before measuring.
		{"directory", &randomPhase{fd: int(d.Fd()), blocks: 1, blockSize: 4096},
			func(err error) bool { return errors.Is(err, errAIOUnsupported) },
			func(err error) bool { return errors.Is(err, syscall.EISDIR) }},
		{"read from write-only", &randomPhase{fd: open(os.O_WRONLY), blocks: 1, blockSize: 4096},
			func(err error) bool { return errors.Is(err, syscall.EBADF) },
			func(err error) bool { return errors.Is(err, syscall.EBADF) }},
		// Blocks past the end of the 4KiB file read nothing.
		{"short read", &randomPhase{fd: open(os.O_RDONLY), blocks: 1 << 20, blockSize: 4096},
			func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "short transfer of 0 of 4096 bytes")
			},
			func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "short transfer of 0 of 4096 bytes")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ph.name, tc.ph.duration = tc.name, 10*time.Second
			eng, err := newAIOEngine(bufs)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, _, err = eng.run(context.Background(), tc.ph, newLatencyRecorder())
			if cerr := eng.close(); cerr != nil {
				t.Errorf("io_destroy: %v", cerr)
			}
			if !tc.aio(err) {
				t.Errorf("libaio: %v", err)
			}
			_, _, err = runGoroutines(context.Background(), tc.ph, bufs, newLatencyRecorder())
			if !tc.sync(err) {
				t.Errorf("goroutines: %v", err)
			}
			// An error ends the phase at once, not at its duration.
			if took := time.Since(start); took > tc.ph.duration/2 {
				t.Errorf("errors took %s to end the phase", took)
			}
		})
	}
}
