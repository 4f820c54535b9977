package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// Cold reads. A read right after a write measures caches (the client's page
// pool, the storage controller's) as much as the media. With read_after, a
// sequential probe keeps each run's files as a generation in
// keep.<probe>/d<unix nanos>/ and reads the oldest generation written at
// least read_after ago, as the NFS cache characterization measured cold
// reads separately. Only the probe's own generations are ever kept, and at
// most enough of them to span read_after.

type generation struct {
	name    string
	written time.Time
}

func listGenerations(k *keepDir) ([]generation, error) {
	names, err := readDirNames(k.fd)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", k.path(), err)
	}
	var gens []generation
	for _, n := range names {
		if !strings.HasPrefix(n, "d") {
			continue
		}
		ns, err := strconv.ParseInt(n[1:], 10, 64)
		if err != nil {
			continue
		}
		gens = append(gens, generation{name: n, written: time.Unix(0, ns)})
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i].written.Before(gens[j].written) })
	return gens, nil
}

// maxGenerations bounds the kept set: enough runs to span read_after, plus
// the one being read and the one being written.
func maxGenerations(p *probe.ProbeConfig) int {
	return int((p.ReadAfter+p.Interval-1)/p.Interval) + 2
}

// generationUsable reports whether a kept generation has exactly the files
// this config writes, at full size; a generation from an older config is
// dropped instead of read.
func generationUsable(gfd int, p *probe.ProbeConfig, names []string) bool {
	entries, err := readDirNames(gfd)
	if err != nil || len(entries) != len(names) {
		return false
	}
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(gfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != p.FileSize {
			return false
		}
	}
	return true
}

func coldRead(ctx context.Context, rc *runContext, mode ioMode, names []string, bufs [][]byte) error {
	p := rc.cfg
	keep, err := rc.probeDir.openKeepDir(p.Name)
	if err != nil {
		return err
	}
	defer keep.Close()
	gens, err := listGenerations(keep)
	if err != nil {
		return err
	}
	now := time.Now()
	for len(gens) > 0 && now.Sub(gens[0].written) >= p.ReadAfter {
		oldest := gens[0]
		gens = gens[1:]
		done, err := readGeneration(ctx, rc, mode, keep, oldest, names, bufs)
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	// Keep this run's files as the newest generation.
	gen := "d" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := unix.Mkdirat(keep.fd, gen, 0o700); err != nil {
		return fmt.Errorf("create %s/%s: %w", keep.path(), gen, err)
	}
	gfd, err := unix.Openat(keep.fd, gen, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s/%s: %w", keep.path(), gen, err)
	}
	defer unix.Close(gfd)
	for _, n := range names {
		if err := unix.Renameat(rc.dir.fd, n, gfd, n); err != nil {
			// A half-moved generation must not be read later as a whole one.
			return errors.Join(fmt.Errorf("keep %s in %s/%s: %w", n, keep.path(), gen, err), removeGeneratedTree(keep.fd, gen))
		}
	}
	// Drop the oldest generations beyond the bound (the new one included in gens count).
	excess := len(gens) + 1 - maxGenerations(p)
	for i := 0; i < excess && i < len(gens); i++ {
		if err := removeGeneratedTree(keep.fd, gens[i].name); err != nil {
			return err
		}
	}
	return nil
}

// readGeneration reads one kept generation and removes it. It returns false
// (and removes it) when the generation does not match the current config.
func readGeneration(ctx context.Context, rc *runContext, mode ioMode, keep *keepDir, g generation, names []string, bufs [][]byte) (bool, error) {
	p := rc.cfg
	gfd, err := unix.Openat(keep.fd, g.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, errors.Join(fmt.Errorf("open %s/%s: %w", keep.path(), g.name, err), removeGeneratedTree(keep.fd, g.name))
	}
	if !generationUsable(gfd, p, names) {
		unix.Close(gfd)
		return false, removeGeneratedTree(keep.fd, g.name)
	}
	lat := newLatencyRecorder()
	secs, err := parallel(p.Workers, lat, func(i int, lat *latencyRecorder) error {
		return transfer(ctx, span{mode: mode, dirfd: gfd, name: names[i], length: p.FileSize, blockSize: p.BlockSize, buf: bufs[i], nonce: rc.nonce, id: uint32(i)}, lat)
	})
	unix.Close(gfd)
	if err != nil {
		return false, err
	}
	total := int64(p.Workers) * p.FileSize
	rc.addOp("read", total, total/p.BlockSize, secs, lat)
	return true, removeGeneratedTree(keep.fd, g.name)
}
