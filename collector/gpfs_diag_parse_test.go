package collector

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const waitersHeader = "mmdiag:waiters:HEADER:version:reserved:reserved:threadId:threadAddr:threadName:waitStartTime:waitTime:isMonitored:condVarAddr:condVarName:condVarReason:mutexAddr:mutexName:auxReason:delayTime:delayReason:\n"

func TestParseMmdiagWaiters(t *testing.T) {
	w, _ := mustParseGPFSFixture(t, "mmdiag-waiters.txt", parseMmdiagWaiters)
	want := map[string]int{"io": 3, "token": 1, "network": 1, "rebuild": 2, "other": 1}
	for class, n := range want {
		if w.count[class] != n {
			t.Errorf("%s waiters = %d, want %d (all: %v)", class, w.count[class], n, w.count)
		}
	}
	// The EventsExporterSenderThread's 196374 s wait is not counted.
	if w.longest != 184.221 {
		t.Errorf("longest = %v, want 184.221", w.longest)
	}

	for _, tc := range []struct {
		name, in    string
		longest     float64
		counted     int
		wantErr     string
		wantNothing bool
	}{
		{name: "no output: an idle daemon", in: "", counted: 0},
		{name: "header only", in: waitersHeader, counted: 0},
		{name: "decimal comma", in: waitersHeader + "mmdiag:waiters:0:1:::1:0:NSDThread:x:12,5:monitored::::::for I/O completion:::\n", longest: 12.5, counted: 1},
		{
			// Columns are found by HEADER name, not by position.
			name:    "reordered columns",
			in:      "mmdiag:waiters:HEADER:version:reserved:reserved:auxReason:waitTime:threadName:\nmmdiag:waiters:0:1:::for tmMsgRevoke on node 10.0.0.1:7.25:Worker:\n",
			longest: 7.25, counted: 1,
		},
		{name: "bad time", in: waitersHeader + "mmdiag:waiters:0:1:::1:0:NSDThread:x:soon:monitored::::::for I/O completion:::\n", wantErr: `waitTime "soon"`, wantNothing: true},
		{name: "NaN time", in: waitersHeader + "mmdiag:waiters:0:1:::1:0:NSDThread:x:NaN:monitored:::::::::\n", wantErr: `waitTime "NaN"`, wantNothing: true},
		{name: "no waitTime column", in: "mmdiag:waiters:HEADER:version:reserved:reserved:threadName:\nmmdiag:waiters:0:1:::x:\n", wantErr: "no waitTime column", wantNothing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _, err := parseMmdiagWaiters([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, c := range w.count {
				n += c
			}
			if tc.wantNothing {
				if n != 0 {
					t.Errorf("counted %d waiters from unusable rows", n)
				}
				return
			}
			if n != tc.counted || w.longest != tc.longest {
				t.Errorf("counted %d, longest %v; want %d, %v", n, w.longest, tc.counted, tc.longest)
			}
		})
	}
}

func TestClassifyWaiter(t *testing.T) {
	for _, tc := range []struct{ thread, reason, want string }{
		{"NSDThread", "for I/O completion on disk sdk", "io"},
		{"SyncHandlerThread", "MsgRecordCondvar RPC wait for NSD I/O completion on node 10.0.0.5 <c0n5>", "io"},
		{"FileBlockWriteFetchHandlerThread", "RPC wait for tmMsgTellAcquire1 on node 10.0.0.2", "token"},
		{"Worker", "waiting for token revoke", "token"},
		{"RebuildWorkThread", "for I/O completion", "rebuild"},
		{"RebuildWorkThread", "VdiskPGDrainCondvar waiting for PG drain", "rebuild"},
		{"GroupProtocolDriverThread", "waiting for log recovery", "rebuild"},
		{"PrefetchWorkerThread", "RPC wait waiting for exclusive use of connection for sending msg", "network"},
		{"RdmaWorker", "for RDMA read completion", "network"},
		{"ReceiveWorkerThread", "for poll on sock 1379", "network"},
		{"WritebehindWorkerThread", "InodeCacheObjMutex", "other"},
		{"", "", "other"},
	} {
		if got := classifyWaiter(tc.thread, tc.reason); got != tc.want {
			t.Errorf("classifyWaiter(%q, %q) = %s, want %s", tc.thread, tc.reason, got, tc.want)
		}
	}
}

func TestParseVerbsStatus(t *testing.T) {
	for _, tc := range []struct{ in, want, wantErr string }{
		{in: "VERBS RDMA status: started\n", want: "started"},
		{in: "\nVERBS RDMA status: disabled\n", want: "disabled"},
		{in: "mmfsadm: some banner\n  VERBS RDMA status: not started\n", want: "not started"},
		{in: "VERBS RDMA status:\n", wantErr: "empty"},
		{in: "", wantErr: "no 'VERBS RDMA status:' line"},
		{in: "mmfsadm: unknown command\n", wantErr: "no 'VERBS RDMA status:' line"},
	} {
		got, _, err := parseVerbsStatus([]byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseMmlsfs(t *testing.T) {
	list, _ := mustParseGPFSFixture(t, "mmlsfs.txt", parseMmlsfs)
	want := []gpfsFilesystem{{"archive", "/gpfs/archive"}, {"home", "/gpfs/home"}, {"projects", "/gpfs/projects"}, {"scratch", "/gpfs/scratch"}}
	if len(list) != len(want) {
		t.Fatalf("got %v, want %v", list, want)
	}
	for i := range want {
		if list[i] != want[i] {
			t.Errorf("file system %d = %+v, want %+v", i, list[i], want[i])
		}
	}

	// Without -T (every attribute), each file system is listed once.
	all := "mmlsfs::HEADER:version:reserved:reserved:deviceName:fieldName:data:remarks:\n" +
		"mmlsfs::0:1:::fs1:minFragmentSize:8192::\n" +
		"mmlsfs::0:1:::fs1:defaultMountPoint:%2Fgpfs%2Ffs1::\n" +
		"mmlsfs::0:1:::fs1:inodeSize:4096::\n" +
		"mmlsfs::0:1:::x y:inodeSize:4096::\n"
	list, bad, err := parseMmlsfs([]byte(all))
	if len(list) != 1 || list[0] != (gpfsFilesystem{"fs1", "/gpfs/fs1"}) {
		t.Errorf("got %+v", list)
	}
	if err != nil || bad.count != 1 || !strings.Contains(bad.first, "line 5: not a GPFS device name") {
		t.Errorf("error %v, skipped %d (first %s); want the invalid name's row skipped and counted", err, bad.count, bad.first)
	}
	if _, _, err := parseMmlsfs([]byte("mmlsfs: No file systems were found.\n")); err == nil {
		t.Error("output without a table was accepted")
	}
}

func TestParseMmlsdisk(t *testing.T) {
	disks, _ := mustParseGPFSFixture(t, "mmlsdisk-scratch.txt", parseMmlsdisk)
	if len(disks) != 6 {
		t.Fatalf("got %d disks, want 6", len(disks))
	}
	if d := disks[3]; d != (gpfsDisk{name: "data_nsd02", pool: "data", failureGroup: "2", status: "ready", availability: "down"}) {
		t.Errorf("disk 4 = %+v", d)
	}
	// Columns by name, and a percent-encoded status.
	reordered := "mmlsdisk::HEADER:version:reserved:reserved:availability:status:nsdName:storagePool:failureGroup:\n" +
		"mmlsdisk::0:1:::up:to%20be%20emptied:d1:data:4,1,0:\n"
	disks, _, err := parseMmlsdisk([]byte(reordered))
	if err != nil || len(disks) != 1 || disks[0] != (gpfsDisk{name: "d1", pool: "data", failureGroup: "4,1,0", status: "to be emptied", availability: "up"}) {
		t.Errorf("got %+v, %v", disks, err)
	}
	if _, _, err := parseMmlsdisk([]byte("mmlsdisk::HEADER:version:reserved:reserved:nsdName:\n")); err == nil {
		t.Error("a HEADER without status and availability was accepted")
	}
	disks, _, err = parseMmlsdisk([]byte("mmlsdisk::HEADER:version:reserved:reserved:nsdName:status:availability:\nmmlsdisk::0:1:::d1::\n"))
	if err == nil || len(disks) != 0 {
		t.Errorf("a row without status was used: %+v, %v", disks, err)
	}
}

func TestParseMmlsqos(t *testing.T) {
	q, _ := mustParseGPFSFixture(t, "mmlsqos-scratch.txt", parseMmlsqos)
	if !q.hasStatus || !q.throttling || len(q.stats) != 4 {
		t.Fatalf("got %+v", q)
	}
	for _, s := range q.stats {
		// Only the newest slot of each pool and class.
		if s.epoch != 1717164480 {
			t.Errorf("pool %s class %s from slot %v, want the newest", s.pool, s.class, s.epoch)
		}
		if s.pool == "system" && s.class == "misc" && (s.iops != 33.267 || s.mbs != 4.675) {
			t.Errorf("system/misc = %+v; the decimal comma of 33,267 was misread", s)
		}
	}

	monitorOnly := "mmlsqos:status:HEADER:version:reserved:reserved:enabled:throttling:monitoring:\nmmlsqos:status:0:1:::Yes:No:Yes:\n"
	if q, _, err := parseMmlsqos([]byte(monitorOnly)); err != nil || !q.hasStatus || q.throttling || len(q.stats) != 0 {
		t.Errorf("monitoring only: %+v, %v", q, err)
	}
	nan := monitorOnly + "mmlsqos:stats:HEADER:version:reserved:reserved:pool:timeEpoch:class:iops:ioql:qsdl:et:MBs:\n" +
		"mmlsqos:stats:0:1:::system:1:other:nan:0:0:30:1:\n" +
		"mmlsqos:stats:0:1:::system:1:misc:2:0:0:30:1,5:\n"
	q, bad, err := parseMmlsqos([]byte(nan))
	if err != nil || bad.count != 1 || !strings.Contains(bad.first, "line 4: stats row") {
		t.Errorf("error %v, skipped %d (first %s); want the NaN row skipped and counted", err, bad.count, bad.first)
	}
	if len(q.stats) != 1 || q.stats[0].mbs != 1.5 {
		t.Errorf("stats = %+v, want only misc with 1.5 MB/s", q.stats)
	}
	if _, _, err := parseMmlsqos([]byte("mmlsqos: File system x is not known.\n")); err == nil {
		t.Error("output without a status row was accepted")
	}
}

func TestParseGPFSMounts(t *testing.T) {
	in := "proc /proc proc rw,relatime 0 0\n" +
		"scratch /gpfs/scratch gpfs rw,relatime 0 0\n" +
		"/dev/home /gpfs/home gpfs ro,relatime 0 0\n" +
		"scratch /var/lib/containers/job\\0401 gpfs rw,relatime 0 0\n" +
		"short line\n" +
		"nfs:/gpfs /mnt/gpfs nfs4 rw 0 0\n"
	got, _ := parseGPFSMounts([]byte(in))
	want := []gpfsMount{
		{"scratch", "/gpfs/scratch", "rw"},
		{"home", "/gpfs/home", "ro"},
		{"scratch", "/var/lib/containers/job 1", "rw"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mount %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestValidGPFSDevice(t *testing.T) {
	for name, want := range map[string]bool{
		"scratch": true, "gpfs01": true, "fs_a-b.c": true, "9fs": true, "_x": true,
		"": false, "-L": false, ".": false, "..": false, "a b": false, "a/b": false, "a;b": false,
		"a*": false, "a\n": false, "fs:x": false, "é": false, strings.Repeat("a", 256): false,
	} {
		if got := validGPFSDevice(name); got != want {
			t.Errorf("validGPFSDevice(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestParseLocaleFloat(t *testing.T) {
	for in, want := range map[string]float64{
		"33,267": 33.267, "1,7781e+08": 1.7781e+08, "4.675": 4.675, "24875": 24875, "0,00000": 0,
	} {
		if got, err := parseLocaleFloat(in); err != nil || got != want {
			t.Errorf("parseLocaleFloat(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "nan", "NaN", "inf", "-Inf", "1,2,3", "1.2,3", "x"} {
		if v, err := parseLocaleFloat(in); err == nil {
			t.Errorf("parseLocaleFloat(%q) = %v, want an error", in, v)
		}
	}
}

func FuzzParseMmdiagWaiters(f *testing.F) {
	readFixtures(f, "mmdiag-waiters.txt")
	f.Add([]byte(waitersHeader + "mmdiag:waiters:0:1:::1:0:T:x:1,5:m::::::for I/O:::\n"))
	f.Add([]byte("foobar\nmmdiag:waiters\nmmdiag:foobar:0:1\n"))
	fixture := readGPFSFixture(f, "mmdiag-waiters.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, fixture, out, yJunk(fixture), nil, asJunkParser(parseMmdiagWaiters))
		w, _, _ := parseMmdiagWaiters(out)
		classes := map[string]bool{}
		for _, c := range gpfsWaiterClasses() {
			classes[c] = true
		}
		for c, n := range w.count {
			if !classes[c] || n <= 0 {
				t.Fatalf("class %q with %d waiters", c, n)
			}
		}
		if w.longest < 0 || math.IsNaN(w.longest) || math.IsInf(w.longest, 0) {
			t.Fatalf("longest = %v", w.longest)
		}
	})
}

func FuzzParseVerbsStatus(f *testing.F) {
	readFixtures(f, "mmfsadm-verbs.txt")
	f.Add([]byte("VERBS RDMA status: disabled\n"))
	f.Add([]byte("mmfsadm: some banner\n\n  VERBS RDMA: started\n"))
	fixture := readGPFSFixture(f, "mmfsadm-verbs.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, fixture, out, verbsJunk, nil, asJunkParser(parseVerbsStatus))
		if s, _, err := parseVerbsStatus(out); err == nil && s == "" {
			t.Fatal("no error and no status")
		}
	})
}

func FuzzParseMmlsfs(f *testing.F) {
	readFixtures(f, "mmlsfs.txt")
	fixture := readGPFSFixture(f, "mmlsfs.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, fixture, out, yJunk(fixture), nil, asJunkParser(parseMmlsfs))
		list, _, _ := parseMmlsfs(out)
		seen := map[string]bool{}
		for _, fs := range list {
			if !validGPFSDevice(fs.name) || seen[fs.name] {
				t.Fatalf("invalid or repeated name %q in %+v", fs.name, list)
			}
			seen[fs.name] = true
		}
	})
}

func FuzzParseMmlsdisk(f *testing.F) {
	readFixtures(f, "mmlsdisk-scratch.txt", "mmlsdisk-home.txt")
	fixture := readGPFSFixture(f, "mmlsdisk-home.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, fixture, out, yJunk(fixture), nil, asJunkParser(parseMmlsdisk))
		disks, _, _ := parseMmlsdisk(out)
		for _, d := range disks {
			if d.name == "" || d.status == "" || d.availability == "" {
				t.Fatalf("disk without name, status or availability: %+v", d)
			}
		}
	})
}

func FuzzParseMmlsqos(f *testing.F) {
	readFixtures(f, "mmlsqos-scratch.txt", "mmlsqos-home.txt", "mmlsqos-projects.txt")
	fixture := readGPFSFixture(f, "mmlsqos-scratch.txt")
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, fixture, out, yJunk(fixture), nil, asJunkParser(parseMmlsqos))
		q, _, _ := parseMmlsqos(out)
		if !q.hasStatus && (q.throttling || len(q.stats) > 0) {
			t.Fatalf("results without a status row: %+v", q)
		}
		seen := map[[2]string]bool{}
		for _, s := range q.stats {
			key := [2]string{s.pool, s.class}
			if seen[key] || s.pool == "" || s.class == "" {
				t.Fatalf("repeated or unnamed pool/class %v", key)
			}
			seen[key] = true
			for _, v := range []float64{s.iops, s.mbs} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("unusable value %v in %+v", v, s)
				}
			}
		}
	})
}

func FuzzParseGPFSMounts(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("fixtures", "proc", "26231", "mounts"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("scratch /a\\040b gpfs ro 0 0\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		checkJunk(t, data, out, mountsJunk, nil, func(b []byte) (any, badLines, error) {
			m, bad := parseGPFSMounts(b)
			return m, bad, nil
		})
		mounts, _ := parseGPFSMounts(out)
		for _, m := range mounts {
			if m.mode != "rw" && m.mode != "ro" {
				t.Fatalf("mode %q", m.mode)
			}
		}
	})
}
