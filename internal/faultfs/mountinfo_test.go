package faultfs

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func readFixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseMountinfoFixture(t *testing.T) {
	entries, err := parseMountinfo(strings.NewReader(string(readFixture(t))))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 10 {
		t.Fatalf("%d entries, want 10", len(entries))
	}
	for _, tc := range []struct {
		mountPoint string
		want       mountEntry
		id         uint64
	}{
		{"/tmp/TestPassThrough123/002", mountEntry{0, 45, "/tmp/TestPassThrough123/002", "fuse.faultfs"}, 45},
		{"/mnt/with space", mountEntry{0, 46, "/mnt/with space", "fuse.faultfs"}, 46},
		// A later mount stacks on top of an earlier one at the same
		// place; only the top one is what a path resolves to.
		{"/gpfs/scratch", mountEntry{0, 301, "/gpfs/scratch", "nfs4"}, 301},
		{"/", mountEntry{254, 0, "/", "ext4"}, 254 << 20},
	} {
		got, ok := findMount(entries, tc.mountPoint)
		if !ok || got != tc.want {
			t.Errorf("findMount(%q) = %+v, %v; want %+v", tc.mountPoint, got, ok, tc.want)
		}
		if id := connectionID(got); id != tc.id {
			t.Errorf("connectionID(%q) = %d, want %d", tc.mountPoint, id, tc.id)
		}
	}
	if got, ok := findMount(entries, "/mnt/with\\040space"); ok {
		t.Errorf("found the escaped form of a mount point: %+v", got)
	}
	if _, ok := findMount(entries, "/nowhere"); ok {
		t.Error("found a mount at /nowhere")
	}
}

func TestParseMountinfoErrors(t *testing.T) {
	for _, line := range []string{
		"22 27 0:21 / /proc rw,relatime proc proc rw",           // no separator
		"22 27 0:21 / /proc rw,relatime - proc",                 // separator too late
		"22 27 021 / /proc rw,relatime - proc proc rw",          // no colon in device
		"22 27 x:21 / /proc rw,relatime - proc proc rw",         // bad major
		"22 27 0:4294967296 / /proc rw,relatime - proc proc rw", // minor overflows
		"22 27 0:21 / /mnt/a\\04 rw,relatime - proc proc rw",    // truncated escape
		"22 27 0:21 / /mnt/a\\999b rw,relatime - proc proc rw",  // not octal
		"22 27 0:21 / /mnt/a\\777b rw,relatime - proc proc rw",  // not a byte
		"22 27 0:21 / /proc rw,relatime - proc\\0 proc rw",      // bad escape in type
	} {
		if _, err := parseMountinfo(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("parsed %q without error", line)
		}
	}
}

// escapeMountinfo mangles a path as the kernel's mountinfo does (space,
// tab, newline and backslash become \ooo), to build test input.
func escapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzMountinfo checks that no input makes the parser panic, and that any
// mount point (once mangled as the kernel does) is found again with its
// device among real lines from the fixture.
func FuzzMountinfo(f *testing.F) {
	fixture := readFixture(f)
	f.Add(fixture, "/tmp/TestPassThrough123/002", uint32(0), uint32(45))
	f.Add(fixture, "/mnt/with space", uint32(0), uint32(46))
	f.Add([]byte("89 27 0:46 / /mnt/a\\134b rw - fuse.faultfs src rw\n"), "/a\\b", uint32(8), uint32(1<<20-1))
	f.Add([]byte(""), "/", uint32(254), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, mountPoint string, major, minor uint32) {
		if entries, err := parseMountinfo(strings.NewReader(string(data))); err == nil {
			findMount(entries, mountPoint)
		}
		// The kernel never shows an empty mount point or one
		// containing a NUL, and a mountinfo line cannot hold fields
		// split by other white space than it escapes.
		if mountPoint == "" || strings.ContainsAny(mountPoint, "\x00\r\v\f") || strings.ContainsFunc(mountPoint, func(r rune) bool {
			return r > 0x7f && strings.TrimSpace(string(r)) == ""
		}) {
			return
		}
		line := fmt.Sprintf("99 27 %d:%d / %s rw,relatime shared:1 - fuse.faultfs /backing rw\n", major, minor, escapeMountinfo(mountPoint))
		entries, err := parseMountinfo(strings.NewReader(string(fixture) + line))
		if err != nil {
			t.Fatalf("parsing fixture plus %q: %v", line, err)
		}
		got, ok := findMount(entries, mountPoint)
		want := mountEntry{major: major, minor: minor, mountPoint: mountPoint, fsType: "fuse.faultfs"}
		if !ok || got != want {
			t.Fatalf("findMount(%q) = %+v, %v; want %+v", mountPoint, got, ok, want)
		}
		// Linux minors have 20 bits (MINORBITS), so only those map
		// one-to-one onto a connection id.
		if id := connectionID(got); minor < 1<<20 && (id>>20 != uint64(major) || id&(1<<20-1) != uint64(minor)) {
			t.Fatalf("connectionID(%d:%d) = %d", major, minor, id)
		}
	})
}
