package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNFSCollector(t *testing.T) {
	c, err := newNFSCollector(filepath.Join("fixtures", "proc"), "", log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("fixtures", "expected", "nfs.prom")
	compareWithFile(t, newTestRegistry("nfs", c, nil), file, metricNames(t, file)...)
}

func TestNFSMountpointInclude(t *testing.T) {
	// The expression must match the whole, unescaped mount point: "/home"
	// alone does not select "/home2", and "/data/old runs" has a blank.
	c, err := newNFSCollector(filepath.Join("fixtures", "proc"), `/home|/data/old runs|/app`, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	want := "\n" + nfsMountInfoHelp + `
plateau_nfs_mount_info{export="nfs01.example.org:/export/home",mountpoint="/home",protocol="tcp",server="nfs01.example.org",version="3"} 1
plateau_nfs_mount_info{export="nfs01.example.org:/export/old runs",mountpoint="/data/old runs",protocol="tcp",server="nfs01.example.org",version="3"} 1
`
	if err := testutil.GatherAndCompare(newTestRegistry("nfs", c, nil), strings.NewReader(want), "plateau_nfs_mount_info"); err != nil {
		t.Error(err)
	}
	if _, err := newNFSCollector("fixtures/proc", "(", log.NewNopLogger()); err == nil {
		t.Error("an invalid expression was accepted")
	}
}

// writeProc builds a minimal procfs tree whose self is pid 4242 with the
// given mountstats.
func writeProc(t *testing.T, mountstats string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("4242", filepath.Join(root, "self")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "4242", "mountstats"), []byte(mountstats), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestNFSNoMounts(t *testing.T) {
	root := writeProc(t, "device proc mounted on /proc with fstype proc\ndevice /dev/sda2 mounted on / with fstype ext4\n")
	c, err := newNFSCollector(root, "", log.NewNopLogger())
	wantNoData(t, c, err, "without NFS mounts")
	// Mounts that exist but are all filtered out are also "no data".
	c, err = newNFSCollector(filepath.Join("fixtures", "proc"), "/nowhere", log.NewNopLogger())
	wantNoData(t, c, err, "when the filter selects nothing")
}

func TestNFSBrokenMountstats(t *testing.T) {
	root := writeProc(t, "device srv:/x mounted on /x with fstype nfs statvers=1.1\n\tbytes:\t1 2 3\n")
	c, err := newNFSCollector(root, "", log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collectAll(c); err == nil || IsNoDataError(err) {
		t.Errorf("Update error = %v, want a parse error", err)
	}
}

func TestNFSServer(t *testing.T) {
	checkStringCases(t, "nfsServer", func(export string) string { return nfsServer(export, "192.0.2.1") }, map[string]string{
		"nfs01.example.org:/export/home": "nfs01.example.org",
		"10.0.0.5:/":                     "10.0.0.5",
		"[fd00:10::5]:/apps":             "fd00:10::5",
		"srv:share":                      "srv",
		"nocolon":                        "192.0.2.1",
	})
}

func TestUnescapeMountField(t *testing.T) {
	checkStringCases(t, "unescapeMountField", unescapeMountField, map[string]string{
		`/plain`:         "/plain",
		`/old\040runs`:   "/old runs",
		`/a\011b\012c`:   "/a\tb\nc",
		`/back\134slash`: `/back\slash`,
		`/bad\9x`:        `/bad\9x`,
		`/short\04`:      `/short\04`,
		`/high\777`:      `/high\777`,
		`\040\040`:       "  ",
	})
}

// escapeMountField escapes as the kernel's mangle() does for mount tables.
func escapeMountField(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func FuzzUnescapeMountField(f *testing.F) {
	f.Add(`/data/old\040runs`)
	f.Add("/home")
	f.Add(`\\\0`)
	f.Fuzz(func(t *testing.T, s string) {
		if got := unescapeMountField(escapeMountField(s)); got != s {
			t.Fatalf("unescape(escape(%q)) = %q", s, got)
		}
		if u := unescapeMountField(s); len(u) > len(s) {
			t.Fatalf("unescaping grew %q to %q", s, u)
		}
	})
}

// A mount point that is not UTF-8 (\377 is the byte 0xff) is exported with
// a replacement character instead of crashing the exporter.
func TestNFSInvalidUTF8Mountpoint(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join("fixtures", "proc", "26231", "mountstats"))
	if err != nil {
		t.Fatal(err)
	}
	odd := strings.ReplaceAll(string(fixture), `/data/old\040runs`, `/data/\377`)
	c, err := newNFSCollector(writeProc(t, odd), `/data/.*`, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	reg := newTestRegistry("nfs", c, nil)
	want := "\n" + nfsMountInfoHelp + `
plateau_nfs_mount_info{export="nfs01.example.org:/export/old runs",mountpoint="/data/` + "\uFFFD" + `",protocol="tcp",server="nfs01.example.org",version="3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_nfs_mount_info"); err != nil {
		t.Error(err)
	}
}
