package yamlfield

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// timestampForms are the examples of https://yaml.org/type/timestamp.html,
// what PyYAML and Go's yaml packages write, and the edges of the grammar.
var timestampForms = []struct {
	in   string
	want time.Time
}{
	// The type's examples.
	{"2001-12-15T02:59:43.1Z", time.Date(2001, 12, 15, 2, 59, 43, 100000000, time.UTC)},       // canonical
	{"2001-12-14t21:59:43.10-05:00", time.Date(2001, 12, 15, 2, 59, 43, 100000000, time.UTC)}, // valid iso8601
	{"2001-12-14 21:59:43.10 -5", time.Date(2001, 12, 15, 2, 59, 43, 100000000, time.UTC)},    // space separated
	{"2001-12-15 2:59:43.10", time.Date(2001, 12, 15, 2, 59, 43, 100000000, time.UTC)},        // no time zone (Z)
	{"2002-12-14", time.Date(2002, 12, 14, 0, 0, 0, 0, time.UTC)},                             // date (00:00:00Z)
	// What tools write: PyYAML (aware, with microseconds, naive), characterize.
	{"2026-12-01 08:52:31+00:00", time.Date(2026, 12, 1, 8, 52, 31, 0, time.UTC)},
	{"2026-12-01 08:52:31.123456+01:00", time.Date(2026, 12, 1, 7, 52, 31, 123456000, time.UTC)},
	{"2026-12-01 08:52:31", time.Date(2026, 12, 1, 8, 52, 31, 0, time.UTC)},
	{"2026-11-30T10:00:00Z", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},
	// The edges of the grammar.
	{"2026-11-30T10:00:00.123456789123Z", time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.UTC)}, // beyond ns: dropped
	{"2026-11-30T10:00:00.Z", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},                     // fraction digits optional
	{"2026-06-30 12:00:00.-05:00", time.Date(2026, 6, 30, 17, 0, 0, 0, time.UTC)},
	{"2026-06-30 12:00:00.000000050Z", time.Date(2026, 6, 30, 12, 0, 0, 50, time.UTC)},
	{"2026-06-30 12:00:00.5", time.Date(2026, 6, 30, 12, 0, 0, 500000000, time.UTC)},
	{"2026-1-5T1:02:03Z", time.Date(2026, 1, 5, 1, 2, 3, 0, time.UTC)}, // one-digit month, day, hour
	{"2026-11-30 \t 10:00:00 \tZ", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},
	{"2026-12-01\t08:52:31", time.Date(2026, 12, 1, 8, 52, 31, 0, time.UTC)},
	{"2026-12-01t08:52:31Z", time.Date(2026, 12, 1, 8, 52, 31, 0, time.UTC)},
	{"2026-06-30T12:00:00 -5", time.Date(2026, 6, 30, 17, 0, 0, 0, time.UTC)},
	{"2026-06-30 12:00:00\t-5", time.Date(2026, 6, 30, 17, 0, 0, 0, time.UTC)},
	{"2026-06-30 12:00:00 +05:45", time.Date(2026, 6, 30, 6, 15, 0, 0, time.UTC)},
	{"2026-06-30 12:00:00+1:00", time.Date(2026, 6, 30, 11, 0, 0, 0, time.UTC)},
	{"2026-06-30 12:00:00-9:30", time.Date(2026, 6, 30, 21, 30, 0, 0, time.UTC)},
	{"2026-06-30 12:00:00+14", time.Date(2026, 6, 29, 22, 0, 0, 0, time.UTC)},
	{"2026-06-30 12:00:00-00", time.Date(2026, 6, 30, 12, 0, 0, 0, time.UTC)},
	{"2024-02-29T23:59:59-23:59", time.Date(2024, 3, 1, 23, 58, 59, 0, time.UTC)}, // leap day, widest zone
	{"2000-02-29", time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC)},
	{"0000-01-01", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
	{"9999-12-31T23:59:59.999999999+00", time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
}

func TestParseTimestampForms(t *testing.T) {
	for _, c := range timestampForms {
		got, err := ParseTimestamp(c.in)
		if err != nil {
			t.Errorf("ParseTimestamp(%q): %v", c.in, err)
			continue
		}
		if !got.Equal(c.want) {
			t.Errorf("ParseTimestamp(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

var timestampNonsense = []string{
	"", "now", "yesterday", "2026", "2026-12", "2026-12-", "2026-12-01T", "2026-12-01 ", "2026-12-01T08", "2026-12-01T08:52",
	"2026-1-5", "2026-12-5", "26-12-01", "20261-12-01", "2026-123-01", "2026/12/01", "2026-12-01T08:52:31ZZ",
	"2026-13-01", "2026-00-10", "2026-02-29", "2026-02-30", "2026-04-31", "2026-12-00", "2026-12-32",
	"2026-12-01 24:00:00", "2026-12-01 08:60:00", "2026-12-01 08:52:60", "2026-12-01 08:5:31", "2026-12-01 08:52:3",
	"2026-12-01 123:52:31", "2026-12-01T08:52:31+24:00", "2026-12-01T08:52:31+05:60", "2026-12-01T08:52:31+123",
	"2026-12-01T08:52:31+05:3", "2026-12-01T08:52:31+", "2026-12-01T08:52:31 ", "2026-12-01T08:52:31 x",
	"2026-12-01T08:52:31.1.2Z", "2026-12-01T08:52:31,5Z", "2026-12-01X08:52:31", "2026-12-01T08:52:31 UTC",
	"2026-12-01T08:52:31+01:00:00", "2026-12-01T 08:52:31", "2026-12-01T08:52:31 +01 ", "-2026-12-01", "+2026-12-01",
	"2026-12-01T08:52:31EST", "1e9", "2026-12-01\n08:52:31", "２０２６-12-01",
}

func TestParseTimestampRejectsNonsense(t *testing.T) {
	for _, s := range timestampNonsense {
		if got, err := ParseTimestamp(s); err == nil {
			t.Errorf("ParseTimestamp(%q) = %v, want an error", s, got)
		}
	}
}

// Every time Go's RFC 3339 parser reads is a YAML timestamp of the same
// instant, so nothing characterize wrote before is refused now.
func TestParseTimestampAcceptsRFC3339(t *testing.T) {
	for _, tm := range []time.Time{time.Now(), time.Date(2026, 11, 30, 10, 0, 0, 0, time.FixedZone("", -7*3600))} {
		for _, layout := range []string{time.RFC3339, time.RFC3339Nano} {
			s := tm.Format(layout)
			got, err := ParseTimestamp(s)
			want, _ := time.Parse(layout, s)
			if err != nil || !got.Equal(want) {
				t.Errorf("ParseTimestamp(%q) = %v, %v; want %v", s, got, err, want)
			}
		}
	}
}

// The decoder's error names file, line and field, and the value.
func TestDecoderTimestampError(t *testing.T) {
	doc, err := Parse([]byte("a: 1\nmeasured_at: 2026-02-30 08:00:00\n"), "b.yml")
	if err != nil {
		t.Fatal(err)
	}
	d := &Decoder{File: "b.yml"}
	d.Mapping(doc.Content[0], "", func(key string, _, v *yaml.Node) {
		if key == "measured_at" {
			d.Timestamp(v, "x.measured_at")
		}
	})
	if len(d.Errs) != 1 || !strings.HasPrefix(d.Errs[0].Error(), `b.yml:2: x.measured_at: invalid time "2026-02-30 08:00:00": day 30 out of range`) {
		t.Fatalf("errors: %v", d.Errs)
	}
}

// yamlTimestamp is the type's regular expression, white space before the
// zone allowed as its example has it (see ParseTimestamp), with captures.
var yamlTimestamp = regexp.MustCompile(`^(?:([0-9]{4})-([0-9]{2})-([0-9]{2})|([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:[Tt]|[ \t]+)([0-9]{1,2}):([0-9]{2}):([0-9]{2})(\.[0-9]*)?(?:[ \t]*(Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)$`)

// FuzzParseTimestamp holds the parser to the grammar: what it accepts the
// regular expression matches, with the same fields; what the expression
// matches it accepts unless a field is out of range; an accepted time
// prints (RFC 3339) and reads back as the same instant; and where Go's
// RFC 3339 parser reads the text too, both read the same instant. (Go's
// parser is laxer: it takes +24:00, +05:60 and a comma before the
// fraction, which are no YAML timestamps.)
func FuzzParseTimestamp(f *testing.F) {
	for _, c := range timestampForms {
		f.Add(c.in)
	}
	for _, s := range timestampNonsense {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTimestamp(s)
		m := yamlTimestamp.FindStringSubmatch(s)
		if err != nil {
			if m != nil && !strings.Contains(err.Error(), "out of range") {
				t.Fatalf("ParseTimestamp(%q) refused a YAML timestamp: %v", s, err)
			}
			return
		}
		if m == nil {
			t.Fatalf("ParseTimestamp(%q) = %v, but it is no YAML timestamp", s, got)
		}
		atoi := func(i int) int { n, _ := strconv.Atoi(m[i]); return n }
		var want [6]int
		if m[1] != "" {
			want = [6]int{atoi(1), atoi(2), atoi(3), 0, 0, 0}
		} else {
			want = [6]int{atoi(4), atoi(5), atoi(6), atoi(7), atoi(8), atoi(9)}
		}
		if have := [6]int{got.Year(), int(got.Month()), got.Day(), got.Hour(), got.Minute(), got.Second()}; have != want {
			t.Fatalf("ParseTimestamp(%q) = %v: fields %v, want %v (in the written zone)", s, got, have, want)
		}
		back, err := ParseTimestamp(got.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(got) {
			t.Fatalf("%q: %v printed as %q reads back as %v, %v", s, got, got.Format(time.RFC3339Nano), back, err)
		}
		if rfc, perr := time.Parse(time.RFC3339Nano, s); perr == nil && !rfc.Equal(got) {
			t.Fatalf("ParseTimestamp(%q) = %v, time.Parse(RFC3339) = %v", s, got, rfc)
		}
	})
}
