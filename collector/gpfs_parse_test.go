package collector

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseMmpmonFixtures(t *testing.T) {
	fsOut, err := os.ReadFile(filepath.Join("fixtures", "gpfs", "fs_io_s.txt"))
	if err != nil {
		t.Fatal(err)
	}
	nsdOut, err := os.ReadFile(filepath.Join("fixtures", "gpfs", "nsd_ds.txt"))
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := parseMmpmon(append(fsOut, nsdOut...))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.fs) != 3 || len(res.nsd) != 2 {
		t.Fatalf("got %d file systems and %d NSDs, want 3 and 2", len(res.fs), len(res.nsd))
	}
	scratch := res.fs[0]
	if scratch.cluster != "hpc.example.org" || scratch.filesystem != "scratch" {
		t.Errorf("first file system = %s/%s", scratch.cluster, scratch.filesystem)
	}
	if scratch.counters[fsReadBytes] != 205607400434 || scratch.counters[fsInodeUpdates] != 544768 {
		t.Errorf("scratch counters = %v", scratch.counters)
	}
	n := res.nsd[0]
	if n.nsd != "data_nsd01" || n.device != "dm-3" || n.read.ops != 138448 || n.write.bytes != 202620928 || n.read.queueSeconds != 2219.714397 {
		t.Errorf("first NSD = %+v", n)
	}
	if res.rc["fs_io_s"] != 0 || res.rc["nsd_ds"] != 0 || len(res.rc) != 2 {
		t.Errorf("return codes = %v", res.rc)
	}
}

func TestParseMmpmon(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		check   func(t *testing.T, r mmpmonResult)
		wantErr string
		// wantBad is in the first skipped line's text, which costs
		// that response only.
		wantBad string
	}{
		{
			// Keys are found by name: a reordered response with a key
			// a newer release added parses the same.
			name: "reordered keys and an unknown key",
			in:   "_fs_io_s_ _fs_ gpfs1 _new_ 7 _cl_ c1 _iu_ 2 _rc_ 0 _br_ 10 _bw_ 20 _oc_ 1 _cc_ 1 _rdc_ 3 _wc_ 4 _dir_ 5\n",
			check: func(t *testing.T, r mmpmonResult) {
				f := r.fs[0]
				if f.filesystem != "gpfs1" || f.cluster != "c1" || f.counters[fsReadBytes] != 10 || f.counters[fsWriteBytes] != 20 || f.counters[fsInodeUpdates] != 2 {
					t.Errorf("got %+v", f)
				}
			},
		},
		{
			name: "missing counter is absent, not zero",
			in:   "_fs_io_s_ _rc_ 0 _cl_ c1 _fs_ gpfs1 _br_ 10\n",
			check: func(t *testing.T, r mmpmonResult) {
				f := r.fs[0]
				if !f.present[fsReadBytes] || f.present[fsWriteBytes] {
					t.Errorf("present = %v", f.present)
				}
			},
		},
		{
			name:    "non-zero rc is a labelled error",
			in:      "_fs_io_s_ _n_ 10.0.0.1 _nn_ n1 _rc_ 1 _t_ 1 _tu_ 2 _cl_ - _fs_ -\n",
			wantErr: "mmpmon fs_io_s returned _rc_ 1",
			check: func(t *testing.T, r mmpmonResult) {
				if len(r.fs) != 0 || r.rc["fs_io_s"] != 1 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:    "bad number",
			in:      "_fs_io_s_ _rc_ 0 _cl_ c1 _fs_ gpfs1 _br_ 1x\n",
			wantBad: `_br_ "1x"`,
		},
		{
			name:    "negative counter",
			in:      "_fs_io_s_ _rc_ 0 _cl_ c1 _fs_ gpfs1 _br_ -1\n",
			wantBad: `_br_ "-1"`,
		},
		{
			name:    "no rc",
			in:      "_fs_io_s_ _cl_ c1 _fs_ gpfs1 _br_ 1\n",
			wantErr: "no readable response",
			wantBad: "no _rc_",
		},
		{
			name:    "no file system",
			in:      "_fs_io_s_ _rc_ 0 _cl_ c1 _br_ 1\n",
			wantBad: "no _fs_",
		},
		{
			name:    "nothing",
			in:      "\n\nmmpmon> \n",
			wantErr: "no readable response",
			wantBad: "not an mmpmon response",
		},
		{
			name: "read and write lines without their nsd_ds line are ignored",
			in:   "_fs_io_s_ _rc_ 0 _cl_ c _fs_ f _br_ 1\n_r_ _ops_ 1 _b_ 2 _tw_ 0.1 _qt_ 0.2\n",
			check: func(t *testing.T, r mmpmonResult) {
				if len(r.nsd) != 0 || len(r.fs) != 1 {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name:    "nsd_ds with a bad time",
			in:      "_nsd_ds_ _rc_ 0 _dev_ sdb _d_ nsd1\n_r_ _ops_ 1 _b_ 2 _tw_ NaN _qt_ 0.2\n",
			wantBad: `_tw_ "NaN"`,
			check: func(t *testing.T, r mmpmonResult) {
				if len(r.nsd) != 1 || r.nsd[0].read.present {
					t.Errorf("got %+v, want nsd1 without its read half", r.nsd)
				}
			},
		},
		{
			// rhist echoes a request spanning several words; the value
			// runs to the next key.
			name: "multi-word value",
			in:   "_rhist_ _n_ 1.2.3.4 _nn_ n1 _req_ nr 512;1024 = _rc_ 0 _t_ 1 _tu_ 2\n",
			check: func(t *testing.T, r mmpmonResult) {
				if r.rc["rhist"] != 0 {
					t.Errorf("rc = %v", r.rc)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, bad, err := parseMmpmon([]byte(tc.in))
			if tc.wantBad == "" && bad.count != 0 {
				t.Errorf("skipped %d lines (first %s), want none", bad.count, bad.first)
			}
			if tc.wantBad != "" && (bad.count != 1 || !strings.Contains(bad.first, tc.wantBad)) {
				t.Errorf("skipped %d lines, first %s; want 1 containing %s", bad.count, bad.first, tc.wantBad)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

func TestSplitMmpmonLine(t *testing.T) {
	tag, pairs := splitMmpmonLine("_mmpmon::nsd_ds_ _n_ 10.0.0.1 _req_ nr 1 = _d_ x stray", nil)
	if tag != "nsd_ds" {
		t.Errorf("tag = %q", tag)
	}
	want := []mmpmonPair{{"_n_", "10.0.0.1"}, {"_req_", "nr 1 ="}, {"_d_", "x stray"}}
	if len(pairs) != len(want) {
		t.Fatalf("pairs = %v", pairs)
	}
	for i := range want {
		if pairs[i] != want[i] {
			t.Errorf("pair %d = %v, want %v", i, pairs[i], want[i])
		}
	}
}

func TestParseY(t *testing.T) {
	y, _ := mustParseGPFSFixture(t, "mmhealth.txt", parseY)
	state := y.table("mmhealth", "State")
	if state == nil || len(state.rows) != 9 {
		t.Fatalf("State table = %+v", state)
	}
	event := y.table("mmhealth", "Event")
	if event == nil || len(event.rows) != 2 {
		t.Fatalf("Event table = %+v", event)
	}
	ent, since := state.column("entityname"), state.column("laststatuschange")
	row := state.rows[7]
	if got := state.value(row, ent); got != "storage.example.org:projects" {
		t.Errorf("entity = %q, want the colon decoded", got)
	}
	if got := state.value(row, since); got != "2024-05-31 16:08:37.112233 CEST" {
		t.Errorf("laststatuschange = %q", got)
	}
	if state.column("nosuch") != -1 || state.value(row, 99) != "" {
		t.Error("unknown column or short row should read as absent")
	}

	y, bad, err := parseY([]byte("mmgetstate::0:1:::n1:1:active:\n"))
	if err != nil || len(y.tables) != 0 || bad.count != 1 || !strings.Contains(bad.first, "line 1: row of mmgetstate: before its HEADER") {
		t.Errorf("a row before its HEADER: tables %+v, skipped %d (first %s), err %v; want it skipped and counted", y.tables, bad.count, bad.first, err)
	}
	y, bad, err = parseY([]byte("warning: something\n\nmmgetstate::HEADER:version:reserved:reserved:state:\r\nmmgetstate::0:1:::down:\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if bad.count != 1 || !strings.Contains(bad.first, "line 1: not a -Y line") {
		t.Errorf("skipped %d lines (first %s), want the warning only", bad.count, bad.first)
	}
	if tb := y.table("mmgetstate", ""); tb == nil || tb.value(tb.rows[0], tb.column("state")) != "down" {
		t.Errorf("CRLF output or a stray line broke parsing: %+v", tb)
	}
}

func TestPercentDecode(t *testing.T) {
	checkStringCases(t, "percentDecode", percentDecode, map[string]string{
		"plain":        "plain",
		"a%3Ab":        "a:b",
		"a%3ab%25c":    "a:b%c",
		"100%":         "100%",
		"%zz":          "%zz",
		"%3":           "%3",
		"%2F%2f":       "//",
		"x%3A%3A%3Ay%": "x:::y%",
	})
}

// percentEncode is the inverse of percentDecode for the fuzz target: it
// encodes '%', ':' and control bytes as mm commands do.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == ':' || c < 0x20 || c >= 0x7f {
			b.WriteString("%")
			b.WriteByte("0123456789ABCDEF"[c>>4])
			b.WriteByte("0123456789ABCDEF"[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func readFixtures(f *testing.F, names ...string) {
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("fixtures", "gpfs", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

func FuzzParseMmpmon(f *testing.F) {
	readFixtures(f, "fs_io_s.txt", "nsd_ds.txt", "rc-error/fs_io_s.txt")
	f.Add([]byte("_fs_io_s_ _rc_ 0 _cl_ c _fs_ f _br_ 1\n_r_ _ops_ 1\n"))
	f.Add([]byte("mmpmon> \nfs_io_s\n"))
	fixture := append(readGPFSFixture(f, "fs_io_s.txt"), readGPFSFixture(f, "nsd_ds.txt")...)
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, fixture, out, mmpmonJunk, nil, asJunkParser(parseMmpmon))
		res, _, err := parseMmpmon(out)
		if err == nil && len(res.rc) == 0 {
			t.Fatal("no error, yet no response was recognised")
		}
		for _, fs := range res.fs {
			if fs.filesystem == "" {
				t.Fatalf("file system without a name: %+v", fs)
			}
		}
		for _, n := range res.nsd {
			if n.nsd == "" {
				t.Fatalf("NSD without a name: %+v", n)
			}
			for _, io := range []mmpmonNSDIO{n.read, n.write} {
				if io.waitSeconds < 0 || io.queueSeconds < 0 || io.waitSeconds != io.waitSeconds {
					t.Fatalf("bad NSD times: %+v", io)
				}
			}
		}
		var rcErr *mmpmonRCError
		for tag, rc := range res.rc {
			if rc != 0 && !errors.As(err, &rcErr) {
				t.Fatalf("request %s has rc %d but no *mmpmonRCError was returned", tag, rc)
			}
		}
	})
}

func FuzzParseY(f *testing.F) {
	readFixtures(f, "mmgetstate.txt", "mmhealth.txt", "mmdiag-waiters.txt", "mmlsfs.txt", "mmlsdisk-scratch.txt", "mmlsqos-scratch.txt")
	f.Add([]byte("a:b:HEADER:x:\na:b:1:%3A%zz%4:\n"))
	f.Add([]byte("foobar\nmmhealth:State\nmmhealth:Event:0:1:::x:\n"))
	fixture := readGPFSFixture(f, "mmhealth.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, fixture, out, yJunk(fixture), nil, yTables)
		y, _, err := parseY(out)
		if y == nil {
			t.Fatal("nil result")
		}
		_ = err
		for _, tb := range y.tables {
			if len(tb.header) < 4 || tb.header[2] != "HEADER" {
				t.Fatalf("table without a HEADER: %+v", tb)
			}
			for _, row := range tb.rows {
				if row[0] != tb.command || row[1] != tb.section {
					t.Fatalf("row %q filed under %s:%s", row, tb.command, tb.section)
				}
				for i := range row {
					if v := tb.value(row, i); len(v) > len(row[i]) {
						t.Fatalf("decoding grew %q to %q", row[i], v)
					}
				}
			}
		}
	})
}

func FuzzPercentDecode(f *testing.F) {
	f.Add("storage.example.org:projects")
	f.Add("2024-05-31 16:08:37.112233 CEST")
	f.Add("100%")
	f.Fuzz(func(t *testing.T, s string) {
		if got := percentDecode(percentEncode(s)); got != s {
			t.Fatalf("decode(encode(%q)) = %q", s, got)
		}
		d := percentDecode(s)
		if !strings.Contains(s, "%") && d != s {
			t.Fatalf("decoding changed %q, which has no escapes, to %q", s, d)
		}
		if utf8.ValidString(s) && !strings.Contains(s, "%") && !utf8.ValidString(d) {
			t.Fatal("decoding broke valid UTF-8")
		}
	})
}
