package nodejobs

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLookFixtures(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, spool string
		jobs                []Job
		sources             []string
	}{
		{"cgroup v2 job ids", "v2-jobid", "", []Job{{"4242", SourceCgroupV2}, {"4243", SourceCgroupV2}}, []string{SourceCgroupV2}},
		{"cgroup v2 SLUIDs", "v2-sluid", "", []Job{{"sEKNKTV3WPV500", SourceCgroupV2}}, []string{SourceCgroupV2}},
		{"cgroup v2 idle: the scope's system directory is no job", "v2-idle", "", nil, []string{SourceCgroupV2}},
		{"cgroup v2 multiple slurmd", "v2-multiple-slurmd", "", []Job{{"9", SourceCgroupV2}}, []string{SourceCgroupV2}},
		{"cgroup v1", "v1", "", []Job{{"77", SourceCgroupV1}, {"78", SourceCgroupV1}}, []string{SourceCgroupV1}},
		{"cgroup v1 idle", "v1-idle", "", nil, []string{SourceCgroupV1}},
		{"spool", "", "spool", []Job{{"17", SourceSpool}, {"300", SourceSpool}, {"4242", SourceSpool}}, []string{SourceSpool}},
		{"spool idle", "", "spool-idle", nil, []string{SourceSpool}},
		{"both sources", "v2-jobid", "spool",
			[]Job{{"4242", SourceCgroupV2}, {"4243", SourceCgroupV2}, {"17", SourceSpool}, {"300", SourceSpool}, {"4242", SourceSpool}},
			[]string{SourceCgroupV2, SourceSpool}},
		{"no Slurm on this node", "missing", "missing", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Detector{}
			if tc.cgroup != "" {
				d.CgroupRoot = filepath.Join("testdata", tc.cgroup)
			}
			if tc.spool != "" {
				d.SpoolDir = filepath.Join("testdata", tc.spool)
			}
			o := d.Look()
			if len(o.Errs) > 0 {
				t.Fatalf("errors: %v", o.Errs)
			}
			if !reflect.DeepEqual(o.Jobs, tc.jobs) {
				t.Errorf("jobs %v, want %v", o.Jobs, tc.jobs)
			}
			if !reflect.DeepEqual(o.Sources, tc.sources) {
				t.Errorf("sources %v, want %v", o.Sources, tc.sources)
			}
			if o.Running() != (len(tc.jobs) > 0) || o.Visible() != (len(tc.sources) > 0) {
				t.Errorf("Running %v Visible %v for jobs %v sources %v", o.Running(), o.Visible(), tc.jobs, tc.sources)
			}
		})
	}
}

// A root that is a file is as absent as one that does not exist: a wrong
// flag must not read as "a job holds the node" nor fail every slot.
func TestLookRootIsAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o := Detector{CgroupRoot: f, SpoolDir: f}.Look()
	if o.Running() || o.Visible() || len(o.Errs) > 0 {
		t.Errorf("got %+v, want nothing seen and no error", o)
	}
}

// A spool directory the daemon may not list is an error that names it,
// while the cgroup tree still counts.
func TestLookUnreadableSpool(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root lists any directory")
	}
	spool := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(spool, 0o000); err != nil {
		t.Fatal(err)
	}
	o := Detector{CgroupRoot: filepath.Join("testdata", "v2-jobid"), SpoolDir: spool}.Look()
	if !o.Running() || len(o.Errs) != 1 || !strings.Contains(o.Errs[0].Error(), spool) {
		t.Errorf("got %+v, want the cgroup jobs and one error naming %s", o, spool)
	}
}

func TestParseStepSocket(t *testing.T) {
	for name, want := range map[string][2]string{
		"n1_4242.0":             {"4242", "0"},
		"n1_4242.4294967295":    {"4242", "4294967295"},
		"node_a_17.4294967294":  {"17", "4294967294"},
		"n1_300.0.1":            {"300", "0"},
		"cred_state":            {},
		"cred_state.old":        {},
		"hwloc_topo_whole.xml":  {},
		"n1_4242.x":             {},
		"n1_4242":               {},
		"_4242.0":               {},
		"n1_4242.4294967296":    {},
		"n1_4242.0.1.2":         {},
		"n1_+1.0":               {},
		"n1_.0":                 {},
		"slurmd.state":          {},
		"n1_99999999999999.0":   {},
		"n1_4242.0.4294967295":  {"4242", "0"},
		"compute-001_123456.12": {"123456", "12"},
	} {
		job, step, ok := ParseStepSocket(name)
		if ok != (want[0] != "") || job != want[0] || step != want[1] {
			t.Errorf("ParseStepSocket(%q) = %q, %q, %v; want %q, %q", name, job, step, ok, want[0], want[1])
		}
	}
}

func TestCgroupV2JobID(t *testing.T) {
	for name, want := range map[string]string{
		"job_4242":        "4242",
		"sEKNKTV3WPV500":  "sEKNKTV3WPV500",
		"s5K1KKYAYG5D00":  "s5K1KKYAYG5D00",
		"system":          "",
		"job_":            "",
		"job_x":           "",
		"sEKNKTV3WPV5OO":  "", // O is not Crockford base32
		"sekNKTV3WPV500":  "", // lower case is not how Slurm prints it
		"SEKNKTV3WPV500":  "",
		"sEKNKTV3WPV5000": "",
		"cgroup.procs":    "",
	} {
		id, ok := CgroupV2JobID(name)
		if ok != (want != "") || (ok && id != want) {
			t.Errorf("CgroupV2JobID(%q) = %q, %v; want %q", name, id, ok, want)
		}
	}
}

// FuzzParseStepSocket holds the parser to what slurmstepd writes: whatever
// it accepts is <something>_<uint32>.<uint32>[.<uint32>] and gives back
// those numbers, so no other spool file is taken for a job.
func FuzzParseStepSocket(f *testing.F) {
	for _, s := range []string{"n1_4242.0", "node_a_17.4294967294", "n1_300.0.1", "cred_state", "n1_4242.x", "_1.0", "a_1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		job, step, ok := ParseStepSocket(name)
		if !ok {
			if job != "" || step != "" {
				t.Fatalf("rejected %q but returned %q, %q", name, job, step)
			}
			return
		}
		i := strings.LastIndexByte(name, '_')
		if i < 1 || !strings.HasPrefix(name[i+1:], job+"."+step) {
			t.Fatalf("accepted %q as job %q step %q, which it does not end with", name, job, step)
		}
		if !isUint32(job) || !isUint32(step) {
			t.Fatalf("accepted %q with non-uint32 ids %q, %q", name, job, step)
		}
	})
}

// FuzzCgroupV2JobID: an accepted directory name is job_<digits> or a
// SLUID, never the scope's system directory.
func FuzzCgroupV2JobID(f *testing.F) {
	for _, s := range []string{"job_1", "sEKNKTV3WPV500", "system", "job_", "s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		id, ok := CgroupV2JobID(name)
		if !ok {
			return
		}
		if name == "system" || (name != "job_"+id && !(IsSLUID(name) && id == name)) || id == "" {
			t.Fatalf("accepted %q as job %q", name, id)
		}
	})
}
