package yamlfield

import (
	"errors"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// ParseTimestamp reads a time in any form of the YAML 1.1 timestamp type
// (https://yaml.org/type/timestamp.html), which YAML tools write:
//
//	2001-12-15T02:59:43.1Z        canonical
//	2001-12-14t21:59:43.10-05:00  iso8601 (T or t)
//	2001-12-14 21:59:43.10 -5     space separated (as PyYAML writes datetimes)
//	2001-12-15 2:59:43.10         no time zone: UTC
//	2002-12-14                    date only: midnight UTC
//
// Its grammar is the type's regular expression:
//
//	[0-9]{4}-[0-9]{2}-[0-9]{2}                        (date only)
//	| [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}                  (year, month, day)
//	  ([Tt]|[ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}       (hour, minute, second)
//	  (\.[0-9]*)?                                     (fraction)
//	  ([ \t]*(Z|[-+][0-9]{1,2}(:[0-9]{2})?))?         (time zone)
//
// White space is allowed before a numeric zone as well as before Z: the
// type's own example ("2001-12-14 21:59:43.10 -5") has it, and PyYAML
// accepts it, although the expression on that page puts it before Z only.
// Digits beyond nanoseconds are dropped. Beyond the grammar, the fields
// must make a real instant: month 1-12, a day the month has, hour 0-23,
// minute and second 0-59 (Go's time has no leap second) and a zone offset
// under 24 hours, so "2026-02-30" or "2026-12-01 25:00:00" is an error
// rather than a date moved on by time.Date's normalization.
func ParseTimestamp(s string) (time.Time, error) {
	sc := tsScanner{s: s}
	year, ok := sc.digits(4, 4)
	if !ok || !sc.byte('-') {
		return time.Time{}, errors.New("want a date such as 2026-12-01")
	}
	monthStart := sc.i
	month, ok := sc.digits(1, 2)
	if !ok || !sc.byte('-') {
		return time.Time{}, errors.New("want a date such as 2026-12-01")
	}
	twoDigitMonth := sc.i-monthStart == 3
	dayStart := sc.i
	day, ok := sc.digits(1, 2)
	if !ok {
		return time.Time{}, errors.New("want a date such as 2026-12-01")
	}
	if sc.done() {
		// The date-only form is exactly YYYY-MM-DD.
		if !twoDigitMonth || sc.i-dayStart != 2 {
			return time.Time{}, errors.New("a date alone must be YYYY-MM-DD")
		}
		return makeTime(year, month, day, 0, 0, 0, 0, time.UTC)
	}
	if c := sc.peek(); c == 'T' || c == 't' {
		sc.i++
	} else if !sc.spaces() {
		return time.Time{}, errors.New("want T or white space between date and time")
	}
	hour, ok := sc.digits(1, 2)
	if !ok || !sc.byte(':') {
		return time.Time{}, errors.New("want a time such as 08:52:31")
	}
	minute, ok1 := sc.digits(2, 2)
	ok2 := sc.byte(':')
	second, ok3 := sc.digits(2, 2)
	if !ok1 || !ok2 || !ok3 {
		return time.Time{}, errors.New("want a time such as 08:52:31")
	}
	nsec := 0
	if sc.byte('.') {
		scale := 100000000
		for !sc.done() && isDigit(sc.peek()) {
			nsec += int(sc.peek()-'0') * scale
			scale /= 10
			sc.i++
		}
	}
	spaced := sc.spaces()
	loc := time.UTC
	zone := sc.i
	switch c := sc.peek(); {
	case sc.done():
		if spaced {
			return time.Time{}, errors.New("want a time zone after the white space")
		}
	case c == 'Z':
		sc.i++
	case c == '+' || c == '-':
		sc.i++
		zh, ok := sc.digits(1, 2)
		if !ok {
			return time.Time{}, errors.New("want a time zone such as Z, +01:00 or -5")
		}
		zm := 0
		if sc.byte(':') {
			if zm, ok = sc.digits(2, 2); !ok {
				return time.Time{}, errors.New("want a time zone such as Z, +01:00 or -5")
			}
		}
		if zh > 23 || zm > 59 {
			return time.Time{}, fmt.Errorf("time zone offset %s out of range", s[zone:sc.i])
		}
		off := zh*3600 + zm*60
		if c == '-' {
			off = -off
		}
		if off != 0 {
			loc = time.FixedZone("", off)
		}
	default:
		return time.Time{}, errors.New("want a time zone such as Z, +01:00 or -5")
	}
	if !sc.done() {
		return time.Time{}, fmt.Errorf("unexpected %q after the time", sc.rest())
	}
	return makeTime(year, month, day, hour, minute, second, nsec, loc)
}

func makeTime(year, month, day, hour, minute, second, nsec int, loc *time.Location) (time.Time, error) {
	switch {
	case month < 1 || month > 12:
		return time.Time{}, fmt.Errorf("month %d out of range", month)
	case day < 1 || day > daysIn(year, month):
		return time.Time{}, fmt.Errorf("day %d out of range for %04d-%02d", day, year, month)
	case hour > 23:
		return time.Time{}, fmt.Errorf("hour %d out of range", hour)
	case minute > 59:
		return time.Time{}, fmt.Errorf("minute %d out of range", minute)
	case second > 59:
		return time.Time{}, fmt.Errorf("second %d out of range", second)
	}
	return time.Date(year, time.Month(month), day, hour, minute, second, nsec, loc), nil
}

func daysIn(year, month int) int {
	// Day 0 of the next month is the last day of this one.
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

type tsScanner struct {
	s string
	i int
}

func (sc *tsScanner) done() bool   { return sc.i >= len(sc.s) }
func (sc *tsScanner) rest() string { return sc.s[sc.i:] }

func (sc *tsScanner) peek() byte {
	if sc.done() {
		return 0
	}
	return sc.s[sc.i]
}

func (sc *tsScanner) byte(c byte) bool {
	if sc.peek() == c && !sc.done() {
		sc.i++
		return true
	}
	return false
}

// spaces skips blanks and tabs, reporting whether there were any.
func (sc *tsScanner) spaces() bool {
	start := sc.i
	for c := sc.peek(); !sc.done() && (c == ' ' || c == '\t'); c = sc.peek() {
		sc.i++
	}
	return sc.i > start
}

// digits reads between min and max decimal digits as a number.
func (sc *tsScanner) digits(min, max int) (int, bool) {
	v, n := 0, 0
	for n < max && !sc.done() && isDigit(sc.peek()) {
		v = v*10 + int(sc.peek()-'0')
		sc.i++
		n++
	}
	return v, n >= min
}

// Timestamp is a time in a YAML timestamp form (ParseTimestamp), quoted or
// not.
func (d *Decoder) Timestamp(n *yaml.Node, field string) time.Time {
	s, ok := d.Scalar(n, field)
	if !ok {
		return time.Time{}
	}
	t, err := ParseTimestamp(s)
	if err != nil {
		d.Errorf(n, field, "invalid time %q: %v (a YAML timestamp, e.g. 2026-11-30T10:00:00Z, 2026-11-30 10:00:00+00:00 or 2026-11-30)", s, err)
		return time.Time{}
	}
	return t
}
