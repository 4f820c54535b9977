package probe

import (
	"context"
	"time"
)

// Sleep waits d, or less if ctx ends first, and returns ctx.Err() then.
// A run's spacing and a Slurm step's common start both wait this way.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
