package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/procfs"
)

// procfsMountstats parses data with procfs, the parser the collector used
// before, from a mountstats file written under root, and returns what the
// collector exports of it. procfs panics on some input (an rdma xprt line
// with more than 31 numbers); that is returned as an error.
func procfsMountstats(root string, data []byte) (_ []nfsMountStats, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("procfs panicked: %v", r)
		}
	}()
	if err := os.WriteFile(filepath.Join(root, "4242", "mountstats"), data, 0o644); err != nil {
		return nil, err
	}
	pfs, err := procfs.NewFS(root)
	if err != nil {
		return nil, err
	}
	p, err := pfs.Proc(4242)
	if err != nil {
		return nil, err
	}
	mounts, err := p.MountStats()
	if err != nil {
		return nil, err
	}
	return fromProcfs(mounts), nil
}

// fromProcfs reduces procfs's mounts to what the collector exported of
// them when it used procfs.
func fromProcfs(mounts []*procfs.Mount) []nfsMountStats {
	var out []nfsMountStats
	for _, m := range mounts {
		s, ok := m.Stats.(*procfs.MountStatsNFS)
		if !ok {
			continue
		}
		n := nfsMountStats{
			device: m.Device, mountpoint: m.Mount,
			vers: s.Opts["vers"], proto: s.Opts["proto"], addr: s.Opts["addr"],
			readBytes: s.Bytes.Read, writeBytes: s.Bytes.Write,
			directReadBytes: s.Bytes.DirectRead, directWriteBytes: s.Bytes.DirectWrite,
			serverReadBytes: s.Bytes.ReadTotal, serverWriteBytes: s.Bytes.WriteTotal,
		}
		for i, t := range s.Transport {
			if i == 0 {
				n.transportProto = t.Protocol
			}
			n.transports++
			n.connects += t.Connect
			n.sends += t.Sends
			n.receives += t.Receives
			n.badXIDs += t.BadTransactionIDs
			n.backlog += t.CumulativeBacklog
		}
		for _, o := range s.Operations {
			if o.Transmissions > o.Requests {
				n.retransmissions += o.Transmissions - o.Requests
			}
			if o.Requests == 0 && o.Transmissions == 0 {
				continue
			}
			n.ops = append(n.ops, nfsOpStats{
				name:     o.Operation,
				requests: o.Requests, transmissions: o.Transmissions, majorTimeouts: o.MajorTimeouts,
				rttMillis: o.CumulativeTotalResponseMilliseconds, executeMillis: o.CumulativeTotalRequestMilliseconds,
			})
		}
		out = append(out, n)
	}
	return out
}

// procfsRoot makes a procfs tree for procfsMountstats.
func procfsRoot(tb testing.TB) string {
	tb.Helper()
	root := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
		tb.Fatal(err)
	}
	return root
}

// benchMountstats returns the 40-mount file of BenchmarkScrape.
func benchMountstats(tb testing.TB) []byte {
	tb.Helper()
	root := tb.TempDir()
	genMountstats(tb, root)
	data, err := os.ReadFile(filepath.Join(root, "4242", "mountstats"))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func fixtureMountstats(tb testing.TB) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("fixtures", "proc", "26231", "mountstats"))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func diffMounts(t *testing.T, got, want []nfsMountStats) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Errorf("%d NFS mounts, procfs has %d", len(got), len(want))
	}
	for i := 0; i < len(got) && i < len(want); i++ {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("mount %d:\n got %+v\nwant %+v (procfs)", i, got[i], want[i])
		}
	}
}

func TestParseMountstatsMatchesProcfs(t *testing.T) {
	root := procfsRoot(t)
	for name, data := range map[string][]byte{"fixture": fixtureMountstats(t), "benchmark": benchMountstats(t)} {
		t.Run(name, func(t *testing.T) {
			want, err := procfsMountstats(root, data)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := parseMountstats(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) < 4 {
				t.Fatalf("only %d NFS mounts", len(got))
			}
			diffMounts(t, got, want)
		})
	}
}

// brokenMountstats are blocks the kernel does not write; each of the NFS
// ones is dropped with an error.
var brokenMountstats = []string{
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\tbytes:\t1 2 3\n",
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\tbytes:\t1 2 3 4 5 six 7 8\n",
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\txprt:\ttcp 1 2 3\n",
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\txprt:\tquic 1 2 3 4 5 6 7 8 9 10 11 12 13\n",
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\tper-op statistics\n\tREAD: 1 2 3\n\n",
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\tper-op statistics\n\tREAD: 1 2 3 4 5 6 7 -8 0\n\n",
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\tper-op statistics\n\tREAD: 1 2 3 4 5 6 7 18446744073709551616 0\n\n",
	// The blank line ends the header; procfs then reads op lines.
	"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\n" +
		"device srv:/y mounted on /y with fstype nfs statvers=1.1\n\n",
	// Not NFS blocks: skipped, where procfs fails the whole file.
	"device srv:/x mounted on /x with fstype ext4 statvers=1.1\n",
	"device srv:/x mounted on\n",
	"device\n",
}

func FuzzParseMountstats(f *testing.F) {
	f.Add(fixtureMountstats(f))
	f.Add(benchMountstats(f))
	for _, s := range brokenMountstats {
		f.Add([]byte(s))
	}
	// procfs indexes past its array with more than 31 rdma numbers.
	f.Add([]byte("device a:/b mounted on /b with fstype nfs4 statvers=1.1\n\txprt:\trdma" + strings.Repeat(" 7", 40) + "\n"))
	f.Add([]byte("device a:/b mounted on /b with fstype nfs4 statvers=1.1\n\topts:\tvers=4.2,vers,proto=udp,proto=rdma=x,addr=1\n" +
		"\txprt:\tudp 1 2 3 4 5 6 7 8 9 10\n\txprt:\trdma 0 0 1 0 12 30214 30214 0 60428 0 0 0 0 0 0 0 0 0 0 0 0 0 0 3 0 0 0 0\n"))
	f.Add([]byte("garbage\n\tage: 12\nRPC iostats version: 1.1\n"))
	root := procfsRoot(f)
	fixture := fixtureMountstats(f)
	top := mountstatsTopLevel(fixture)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkJunk(t, fixture, data, mountstatsJunk, top, asJunkParser(parseMountstats))
		got, _, err := parseMountstats(data)
		for _, m := range got {
			for _, o := range m.ops {
				if o.requests == 0 && o.transmissions == 0 {
					t.Fatalf("unused operation %+v kept", o)
				}
			}
		}
		if hasUnicodeSpace(data) || hasLongLine(data, 64<<10) {
			// strings.Fields splits at U+0085, U+00A0 and the like, which
			// the kernel does not escape in names; and bufio.Scanner in
			// procfs fails on lines over 64 KiB. Neither is a disagreement
			// about mountstats.
			return
		}
		want, perr := procfsMountstats(root, data)
		if perr != nil {
			return
		}
		if err != nil {
			t.Fatalf("procfs parses the file, this parser fails: %v", err)
		}
		diffMounts(t, got, want)
	})
}

func hasUnicodeSpace(data []byte) bool {
	for _, r := range string(data) {
		if r >= 0x80 && unicode.IsSpace(r) {
			return true
		}
	}
	return false
}

func hasLongLine(data []byte, n int) bool {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return len(data) >= n
		}
		if i >= n {
			return true
		}
		data = data[i+1:]
	}
	return false
}

func TestParseMountstatsTransports(t *testing.T) {
	data := `device srv:/udp mounted on /udp with fstype nfs statvers=1.1
	opts:	rw,vers=3,proto=udp,addr=10.0.0.1
	xprt:	udp 832 1 100 99 2 7 300 64 410 3
	per-op statistics
	        READ: 10 12 1 0 0 0 30 40 0

device srv:/rdma mounted on /rdma with fstype nfs4 statvers=1.1
	opts:	rw,vers=4.1,proto=rdma,addr=10.0.0.1
	xprt:	rdma 0 0 1 0 12 30214 30213 2 60428 5 0 0 0 0 0 0 0 0 0 0 0 0 0 3 0 0 0 0
	per-op statistics
	        READ: 10 10 0 0 0 0 30 40 0

device srv:/nconnect mounted on /nconnect with fstype nfs4 statvers=1.1
	opts:	rw,vers=4.2,nconnect=2,addr=10.0.0.1
	xprt:	tcp 700 0 1 0 3 1000 999 1 2000 40 64 2100 300
	xprt:	tcp 701 0 2 0 3 800 800 0 1500 10 64 1600 200
	per-op statistics
	        READ: 10 11 0 0 0 0 30 40 0
	       WRITE: 5 7 0 0 0 0 10 20

`
	got, _, err := parseMountstats([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []nfsMountStats{
		{
			device: "srv:/udp", mountpoint: "/udp", vers: "3", proto: "udp", addr: "10.0.0.1",
			transports: 1, transportProto: "udp", sends: 100, receives: 99, badXIDs: 2, backlog: 300,
			retransmissions: 2,
			ops:             []nfsOpStats{{name: "READ", requests: 10, transmissions: 12, majorTimeouts: 1, rttMillis: 30, executeMillis: 40}},
		},
		{
			device: "srv:/rdma", mountpoint: "/rdma", vers: "4.1", proto: "rdma", addr: "10.0.0.1",
			transports: 1, transportProto: "rdma", connects: 1, sends: 30214, receives: 30213, badXIDs: 2, backlog: 5,
			ops: []nfsOpStats{{name: "READ", requests: 10, transmissions: 10, rttMillis: 30, executeMillis: 40}},
		},
		{
			device: "srv:/nconnect", mountpoint: "/nconnect", vers: "4.2", addr: "10.0.0.1",
			transports: 2, transportProto: "tcp", connects: 3, sends: 1800, receives: 1799, badXIDs: 1, backlog: 50,
			retransmissions: 3,
			ops: []nfsOpStats{
				{name: "READ", requests: 10, transmissions: 11, rttMillis: 30, executeMillis: 40},
				{name: "WRITE", requests: 5, transmissions: 7, rttMillis: 10, executeMillis: 20},
			},
		},
	}
	diffMounts(t, got, want)
	procfsWant, err := procfsMountstats(procfsRoot(t), []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	diffMounts(t, got, procfsWant)
}

// The kernel ends every NFS block with a blank line, but a file cut short
// (or a test file) may end in the header; the mount is still there.
func TestParseMountstatsNoPerOpAtEOF(t *testing.T) {
	for _, data := range []string{
		"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\topts:\tvers=3,addr=10.0.0.1\n\tbytes:\t1 2 3 4 5 6 7 8",
		"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\topts:\tvers=3,addr=10.0.0.1\n\tbytes:\t1 2 3 4 5 6 7 8\n",
		"device srv:/x mounted on /x with fstype nfs statvers=1.1\n\topts:\tvers=3,addr=10.0.0.1\n\tbytes:\t1 2 3 4 5 6 7 8\n\tper-op statistics\n",
	} {
		got, _, err := parseMountstats([]byte(data))
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		want := []nfsMountStats{{device: "srv:/x", mountpoint: "/x", vers: "3", addr: "10.0.0.1",
			readBytes: 1, writeBytes: 2, directReadBytes: 3, directWriteBytes: 4, serverReadBytes: 5, serverWriteBytes: 6}}
		diffMounts(t, got, want)
	}
}

func TestParseMountstatsMalformed(t *testing.T) {
	for _, s := range brokenMountstats[:8] {
		good := "device srv:/good mounted on /good with fstype nfs statvers=1.1\n\topts:\tvers=3\n\tper-op statistics\n\tREAD: 1 1 0 0 0 0 1 1 0\n\n"
		// The first blank line ends a header, the second the op lines.
		got, _, err := parseMountstats([]byte(good + s + "\n\n" + good))
		if err == nil {
			t.Errorf("%q: no error", s)
			continue
		}
		if !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), `"/x"`) {
			t.Errorf("%q: error %q names no line or mount", s, err)
		}
		if len(got) != 2 || got[0].mountpoint != "/good" || got[1].mountpoint != "/good" {
			t.Errorf("%q: mounts %+v, want the two good ones", s, got)
		}
	}
}

func TestParseMountstatsManyBrokenBlocks(t *testing.T) {
	data := strings.Repeat(brokenMountstats[0]+"\n\n", 100)
	got, _, err := parseMountstats([]byte(data))
	if len(got) != 0 || err == nil {
		t.Fatalf("got %d mounts and %v, want none and an error", len(got), err)
	}
	if want := "line 2: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
	if want := "and 97 more malformed NFS mounts"; !strings.HasSuffix(err.Error(), want) {
		t.Errorf("error %q does not end with %q", err, want)
	}
}

// Names and option values point into the read buffer while parsing; what
// is returned must not, since the buffer is reused by the next scrape.
func TestParseMountstatsCopiesStrings(t *testing.T) {
	data := []byte("device srv:/x mounted on /x with fstype nfs statvers=1.1\n\topts:\tvers=9,proto=sctp,addr=10.0.0.1\n" +
		"\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10\n\tper-op statistics\n\tFROB: 1 1 0 0 0 0 1 1 0\n\n")
	got, _, err := parseMountstats(data)
	if err != nil || len(got) != 1 || len(got[0].ops) != 1 {
		t.Fatalf("%+v, %v", got, err)
	}
	for i := range data {
		data[i] = '#'
	}
	m := got[0]
	if m.device != "srv:/x" || m.mountpoint != "/x" || m.vers != "9" || m.proto != "sctp" || m.addr != "10.0.0.1" || m.ops[0].name != "FROB" {
		t.Errorf("strings changed with the buffer: %+v", m)
	}
}

func TestParseMountstatsLongLines(t *testing.T) {
	long := strings.Repeat("x", 4<<20)
	data := "device " + long + ":/x mounted on /x with fstype nfs statvers=1.1\n" +
		"\topts:\trw," + long + "=1,vers=3\n\tcaps:\t" + long + "\n\tper-op statistics\n\tREAD: 1 1 0 0 0 0 1 1 0\n\n"
	got, _, err := parseMountstats([]byte(data))
	if err != nil || len(got) != 1 || got[0].vers != "3" || len(got[0].device) != len(long)+3 {
		t.Fatalf("%d mounts, %v", len(got), err)
	}
}

func TestReadMountstatsFileLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mountstats")
	data := benchMountstats(t)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	buf, err := readMountstatsFile(path, nil, len(data))
	if err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("read %d bytes of %d: %v", len(buf), len(data), err)
	}
	// A reused buffer of the right size reads without growing.
	if again, err := readMountstatsFile(path, buf, len(data)); err != nil || &again[0] != &buf[0] {
		t.Errorf("the buffer was not reused: %v", err)
	}
	if _, err := readMountstatsFile(path, nil, len(data)-1); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over the limit: %v", err)
	}
}

// A malformed block costs its own mount, not the others: they are
// exported, the collector succeeds, and the line is counted and logged at
// debug level.
func TestNFSMalformedBlock(t *testing.T) {
	fixture := string(fixtureMountstats(t))
	broken := strings.Replace(fixture, "\t      ACCESS: 900 900 0 115200 108000 2 380 401 0\n", "\t      ACCESS: 900 900 zero 115200 108000 2 380 401 0\n", 1)
	if broken == fixture {
		t.Fatal("the fixture has no ACCESS line to break")
	}
	lineNo := strings.Count(broken[:strings.Index(broken, "zero")], "\n") + 1
	var logged bytes.Buffer
	logger := level.NewFilter(log.NewLogfmtLogger(log.NewSyncWriter(&logged)), level.AllowDebug())
	c, err := newNFSCollector(writeProc(t, broken), "", logger)
	if err != nil {
		t.Fatal(err)
	}
	reg := newTestRegistry("nfs", c, logger)
	want := "\n" + nfsMountInfoHelp + `
plateau_nfs_mount_info{export="[fd00:10::5]:/apps",mountpoint="/apps",protocol="rdma",server="fd00:10::5",version="4.1"} 1
plateau_nfs_mount_info{export="nfs01.example.org:/export/old runs",mountpoint="/data/old runs",protocol="tcp",server="nfs01.example.org",version="3"} 1
plateau_nfs_mount_info{export="nfs02.example.org:/projects",mountpoint="/projects",protocol="tcp",server="nfs02.example.org",version="4.2"} 1
` + scrapeSuccessHelp + `
plateau_scrape_collector_success{collector="nfs"} 1
# HELP plateau_collector_parse_errors_total Lines of the source that the collector could not read and skipped.
# TYPE plateau_collector_parse_errors_total counter
plateau_collector_parse_errors_total{collector="nfs",source="mountstats"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "plateau_nfs_mount_info", "plateau_scrape_collector_success", "plateau_collector_parse_errors_total"); err != nil {
		t.Error(err)
	}
	wantLog := fmt.Sprintf(`line %d: NFS mount on \"/home\" dropped: operation \"ACCESS\": \"zero\" is not a number`, lineNo)
	if !strings.Contains(logged.String(), wantLog) {
		t.Errorf("log %q does not contain %q", logged.String(), wantLog)
	}
}

// Two scrapes at once share the collector's buffer pool, not a buffer.
func TestNFSConcurrentUpdates(t *testing.T) {
	c, err := newNFSCollector(filepath.Join("fixtures", "proc"), "", log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	first, err := collectAll(c)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				ms, err := collectAll(c)
				if err != nil || len(ms) != len(first) {
					t.Errorf("%d metrics, %v", len(ms), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkParseMountstats compares the parser with procfs's on the
// 40-mount file of BenchmarkScrape: parsing alone, and reading the file as
// a scrape does, which is all procfs offers.
func BenchmarkParseMountstats(b *testing.B) {
	data := benchMountstats(b)
	root := procfsRoot(b)
	path := filepath.Join(root, "4242", "mountstats")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	// A scrape parses with the scratch memory of an earlier one.
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		s := new(mountstatsScratch)
		for i := 0; i < b.N; i++ {
			if ms, _, err := s.parse(data); err != nil || len(ms) != 40 {
				b.Fatal(len(ms), err)
			}
		}
	})
	b.Run("file", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		s := new(mountstatsScratch)
		for i := 0; i < b.N; i++ {
			var err error
			s.file, err = readMountstatsFile(path, s.file, maxMountstatsSize)
			if err != nil {
				b.Fatal(err)
			}
			if ms, _, err := s.parse(s.file); err != nil || len(ms) != 40 {
				b.Fatal(len(ms), err)
			}
		}
	})
	b.Run("procfs-file", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		pfs, err := procfs.NewFS(root)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			p, err := pfs.Proc(4242)
			if err != nil {
				b.Fatal(err)
			}
			if ms, err := p.MountStats(); err != nil || len(ms) != 42 {
				b.Fatal(len(ms), err)
			}
		}
	})
}
