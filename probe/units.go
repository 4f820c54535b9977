package probe

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Binary units only: HPC tools (IOR -t 8m, IOzone -r 8M, fio's default
// kb_base) treat K/M/G as powers of 1024, and mixing in decimal KB/MB would
// make "8MB" silently differ from "8M".
var sizeUnits = map[string]int64{
	"":    1,
	"B":   1,
	"K":   1 << 10,
	"KiB": 1 << 10,
	"M":   1 << 20,
	"MiB": 1 << 20,
	"G":   1 << 30,
	"GiB": 1 << 30,
	"T":   1 << 40,
	"TiB": 1 << 40,
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

// ParseSize parses "256MiB", "8M", "4096" into bytes.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("invalid size %q (want a number with an optional unit: B, K/KiB, M/MiB, G/GiB, T/TiB)", s)
	}
	mult, ok := sizeUnits[m[2]]
	if !ok {
		return 0, fmt.Errorf("invalid size unit %q in %q (units are binary: K/KiB, M/MiB, G/GiB, T/TiB)", m[2], s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %w", s, err)
	}
	bytes := v * float64(mult)
	if bytes > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	if bytes != math.Trunc(bytes) {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return int64(bytes), nil
}

// FormatSize renders bytes with the largest binary unit that divides it.
func FormatSize(b int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && b%u.mult == 0 {
			return fmt.Sprintf("%d%s", b/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%dB", b)
}

// FormatIO renders an amount of I/O, which is rarely a round size: exactly
// in whole MiB or GiB (as the config writes sizes) below 1GiB or in whole
// GiB, else with one decimal.
func FormatIO(b int64) string {
	switch {
	case b == 0, b%(1<<30) == 0, b < 1<<30 && b%(1<<20) == 0, b < 1<<20 && b%(1<<10) == 0:
		return FormatSize(b)
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
}
