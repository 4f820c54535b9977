package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/probe"
)

// lustreSuperMagic is f_type of a Lustre client mount (LL_SUPER_MAGIC in
// Lustre's lustre_user.h).
const lustreSuperMagic = 0x0BD00BD0

// layoutCheck says how check-config learns a target directory's file
// system and default Lustre layout; tests replace both.
type layoutCheck struct {
	// fsType is the directory's statfs f_type.
	fsType func(path string) (int64, error)
	// lfs is the lfs command, run as `lfs getstripe -d DIR`.
	lfs string
	// timeout bounds each of the two: a hung mount must not hang
	// check-config.
	timeout time.Duration
}

func defaultLayoutCheck(lfs string) layoutCheck {
	return layoutCheck{lfs: lfs, timeout: 10 * time.Second, fsType: func(path string) (int64, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil {
			return 0, err
		}
		return int64(st.Type), nil
	}}
}

var (
	stripeCountField  = regexp.MustCompile(`\bstripe_count:\s*(-?\d+)`)
	stripeOffsetField = regexp.MustCompile(`\bstripe_offset:\s*(-?\d+)`)
)

// lustreLayout describes, for a target on Lustre, which OSTs its probe
// files land on: one OST for a per-OST target (stripe_count 1 and a fixed
// stripe_offset, as `lfs setstripe -c 1 -i N` makes it), else a spread.
// It returns "" for a target on another file system, and a warning when
// the layout of a Lustre directory cannot be checked.
func (lc layoutCheck) lustreLayout(t *probe.Target) (info, warning string) {
	fsType, err := boundedCall(lc.timeout, func() (int64, error) { return lc.fsType(t.Path) })
	if err != nil {
		return "", fmt.Sprintf("warning: target %s: cannot tell whether %s is on Lustre: %v", t.Name, t.Path, err)
	}
	if fsType != lustreSuperMagic {
		return "", ""
	}
	cannot := func(err error) (string, string) {
		return "", fmt.Sprintf("warning: target %s: %s is on Lustre, but its layout cannot be checked (%s getstripe -d: %v); a per-OST target needs `lfs setstripe -c 1 -i N` on its directory",
			t.Name, t.Path, lc.lfs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lc.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, lc.lfs, "getstripe", "-d", t.Path)
	// A child that outlives lfs must not hold check-config on the pipe.
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return cannot(fmt.Errorf("no answer in %s", lc.timeout))
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, firstLine(string(ee.Stderr)))
		}
		return cannot(err)
	}
	count, offset := stripeCountField.FindSubmatch(out), stripeOffsetField.FindSubmatch(out)
	if count == nil || offset == nil {
		return cannot(fmt.Errorf("no stripe_count and stripe_offset in %q", firstLine(string(out))))
	}
	c, _ := strconv.Atoi(string(count[1]))
	o, _ := strconv.Atoi(string(offset[1]))
	if c == 1 && o >= 0 {
		return fmt.Sprintf("target %s: Lustre, every probe file on OST index %d (stripe_count 1): a per-OST target", t.Name, o), ""
	}
	return fmt.Sprintf("target %s: Lustre, stripe_count %d, stripe_offset %d: probe files spread over OSTs (a per-OST target needs `lfs setstripe -c 1 -i N`)", t.Name, c, o), ""
}

// boundedCall waits at most timeout for call, which is left to return on
// its own when it does not: a statfs of a hung mount blocks in the kernel.
func boundedCall[T any](timeout time.Duration, call func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		var zero T
		return zero, fmt.Errorf("no answer in %s", timeout)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
