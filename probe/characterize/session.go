package characterize

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// Session is what one characterization does beyond its runs: where the
// baselines go, whether probes are swept and where the curves go, and how
// it reports. The characterize command fills it from its flags and prints
// what it is told.
type Session struct {
	// Baselines are the entries already on file (NewBaselines when there
	// is none); the measured probes replace theirs, the rest are kept.
	Baselines *plateau.Baselines
	// Path is the baselines file written; OutDir takes each sweep's SVG
	// and CSV.
	Path, OutDir string
	// Sweep runs each characterized probe's sweep after the baselines are
	// written.
	Sweep bool

	// OnNotCharacterized reports a probe whose baseline runs failed.
	OnNotCharacterized func(err error)
	// OnWritten reports the baselines file written, its backup ("" when
	// there was no file) and what changed in it; OnNothingWritten that no
	// probe could be characterized, so the file was left alone.
	OnWritten        func(path, backup string, changes []plateau.BaselineChange)
	OnNothingWritten func(path string)
	// OnNoSweep reports a probe not swept because its baseline failed;
	// OnSwept a sweep, with its files when written, and why it is
	// incomplete (nil when it is not).
	OnNoSweep func(ref ProbeRef)
	OnSwept   func(sw *Sweep, svgPath, csvPath string, err error)
}

// ErrIncomplete is returned, wrapped with a count, when some probes could
// not be characterized or swept in full.
var ErrIncomplete = errors.New("could not be characterized fully")

// Characterize measures the baseline of each probe, writes the baselines
// once all are measured, then sweeps the probes that were characterized.
// Baselines are written before any sweep starts, so an interrupted sweep
// loses none of them. It returns an error wrapping ErrIncomplete when some
// probe failed, and any other error when the baselines could not be
// written.
func (c *Characterizer) Characterize(ctx context.Context, refs []ProbeRef, s Session) error {
	failed := 0
	var measured []*plateau.Measured
	var characterized []ProbeRef
	for _, ref := range refs {
		m, err := c.Baseline(ctx, ref)
		if err != nil {
			failed++
			call1(s.OnNotCharacterized, err)
			// Unstable ops are refused; the probe's stable ones are
			// written.
			if m == nil || len(m.Entries) == 0 {
				continue
			}
		}
		measured = append(measured, m)
		characterized = append(characterized, ref)
	}
	if len(measured) == 0 {
		if s.OnNothingWritten != nil {
			s.OnNothingWritten(s.Path)
		}
	} else {
		var changes []plateau.BaselineChange
		for _, m := range measured {
			changes = append(changes, s.Baselines.Replace(m)...)
		}
		backup, err := s.Baselines.Write(s.Path)
		if err != nil {
			return fmt.Errorf("write baselines: %w", err)
		}
		if s.OnWritten != nil {
			s.OnWritten(s.Path, backup, changes)
		}
	}
	if s.Sweep {
		for _, ref := range refs {
			if !slices.Contains(characterized, ref) {
				c.SkipSweep(ref)
				if s.OnNoSweep != nil {
					s.OnNoSweep(ref)
				}
				continue
			}
			sw, err := c.Sweep(ctx, ref)
			var svgPath, csvPath string
			if sw != nil && len(sw.Steps) > 0 {
				var werr error
				svgPath, csvPath, werr = sw.WriteFiles(s.OutDir)
				err = errors.Join(err, werr)
			}
			if err != nil {
				failed++
			}
			if s.OnSwept != nil {
				s.OnSwept(sw, svgPath, csvPath, err)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d probe(s) %w", failed, len(refs), ErrIncomplete)
	}
	return nil
}

func call1[T any](fn func(T), v T) {
	if fn != nil {
		fn(v)
	}
}
