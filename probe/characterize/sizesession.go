package characterize

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// SizeSession is the size sweeps of one characterization, run after
// Characterize: which probes are swept, what bounds them, where their
// smallest good sizes are written, and how it reports.
type SizeSession struct {
	Sizer SizeSweeper
	// Baselines and Path are the baselines file Characterize wrote; the
	// smallest good sizes go into it beside the plateaus.
	Baselines *plateau.Baselines
	Path      string
	// Characterized are the probes whose baselines this characterization
	// wrote (see CharacterizedIn): only those are size-swept, as only
	// those are swept.
	Characterized map[plateau.ProbeKey]bool

	// OnSwept reports each probe's size sweep, or that it had none.
	OnSwept func(SizeSweepReport)
	// OnWritten reports the baselines file written with the sizes and its
	// backup ("" when there was no file before).
	OnWritten func(path, backup string)
}

// CharacterizedIn is the set of probes that changes give a new baseline.
func CharacterizedIn(changes []plateau.BaselineChange) map[plateau.ProbeKey]bool {
	out := map[plateau.ProbeKey]bool{}
	for _, ch := range changes {
		if ch.New != nil {
			out[plateau.ProbeKey{Target: ch.Key.Target, Probe: ch.Key.Probe}] = true
		}
	}
	return out
}

// SizeSweepAll runs the size sweep of each characterized probe and writes
// the smallest good sizes to the baselines file; a size on file that a
// new sweep no longer finds good is removed. It returns an error wrapping
// ErrIncomplete when a sweep stopped early, and any other error when the
// file could not be written.
func (c *Characterizer) SizeSweepAll(ctx context.Context, refs []ProbeRef, s SizeSession) error {
	var errs []error
	changed := false
	report := func(r SizeSweepReport) {
		if s.OnSwept != nil {
			s.OnSwept(r)
		}
	}
	for _, ref := range refs {
		key := plateau.ProbeKey{Target: ref.Target.Name, Probe: ref.Probe.Name}
		if !s.Characterized[key] {
			c.SkipSizeSweep(s.Sizer, ref)
			report(SizeSweepReport{Ref: ref, NotSwept: true})
			continue
		}
		sw, err := c.SweepSizes(ctx, s.Sizer, ref)
		r := SizeSweepReport{Ref: ref, Sweep: sw, Err: err}
		switch m, ok := sw.Result(); {
		case err != nil:
			errs = append(errs, err)
		case ok:
			s.Baselines.SetMinSize(key.Target, key.Probe, m)
			changed = true
		default:
			// A size on file from an earlier sweep no longer holds.
			if _, had := s.Baselines.MinSizes[key]; had {
				delete(s.Baselines.MinSizes, key)
				changed, r.Removed = true, true
			}
		}
		report(r)
	}
	if changed {
		backup, err := s.Baselines.Write(s.Path)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("write baselines: %w", err))...)
		}
		if s.OnWritten != nil {
			s.OnWritten(s.Path, backup)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrIncomplete, errors.Join(errs...))
	}
	return nil
}

// RoomAboveMinFree is how many bytes the target's file system can take
// and keep its min_free_ratio free: the SizeSweeper's Room on a real file
// system.
func RoomAboveMinFree(t *probe.Target) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(t.Path, &st); err != nil {
		// SizeSweeper.Plan names the probe and "free space".
		return 0, err
	}
	bsize := uint64(st.Bsize)
	avail := float64(st.Bavail * bsize)
	keep := t.MinFreeRatio * float64(st.Blocks*bsize)
	return int64(max(0, avail-keep)), nil
}
