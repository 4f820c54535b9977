// Package nodejobs tells whether a Slurm job holds this node, from what
// slurmd leaves on the node itself: the job directories of its cgroup tree
// and the step sockets in its spool directory. It never asks slurmctld: a
// fleet of daemons polling the controller would load it more than the
// probes load the file system. Each look is a few readdirs, done when the
// scheduler asks at a probe's slot; the package runs nothing of its own.
//
// What counts as a job:
//
//	cgroup v2  <cgroup>/system.slice/slurmstepd.scope/job_<id>     (Slurm before 26.05, or CgroupJobIdPaths=yes)
//	           <cgroup>/system.slice/slurmstepd.scope/<SLUID>      (Slurm 26.05 default: "s" and 13 Crockford base32 characters)
//	           (<node>_slurmstepd.scope on slurmd built with --enable-multiple-slurmd)
//	cgroup v1  <cgroup>/<controller>/slurm/uid_<uid>/job_<id>      (freezer, memory, cpuset, devices, cpu,cpuacct, ...)
//	spool      <spool>/<node>_<jobid>.<stepid>[.<het component>]   (one socket per running step)
//
// The scope's own "system" directory (slurmstepd's, not a job's) and the
// spool's other files (cred_state, hwloc topology, conf-cache) are not
// jobs. A source whose root does not exist is absent, not an error: a node
// without cgroup plugins (proctrack/linuxproc) has only the spool.
package nodejobs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Sources of a seen job, as the status page and logs name them.
const (
	SourceCgroupV2 = "cgroup_v2"
	SourceCgroupV1 = "cgroup_v1"
	SourceSpool    = "spool"
)

// Job is one job seen on the node. ID is the numeric job id, or the SLUID
// when the cgroup v2 tree names jobs by it (a SLUID does not contain the
// numeric id, so the same job seen in the spool appears twice).
type Job struct {
	ID     string `json:"id"`
	Source string `json:"source"`
}

// Observation is one look at the node.
type Observation struct {
	// Jobs are the jobs seen, sorted by source then id, without repeats.
	Jobs []Job
	// Sources names the sources whose root exists and was read, so that
	// "no job" can be told from "cannot see jobs here".
	Sources []string
	// Errs are the sources that exist but could not be read (a spool
	// directory the daemon's user may not list); what the others saw
	// still counts.
	Errs []error
}

// Running reports whether a job holds the node.
func (o Observation) Running() bool { return len(o.Jobs) > 0 }

// Visible reports whether any source could be read: only then does "no
// job" mean the node is idle.
func (o Observation) Visible() bool { return len(o.Sources) > 0 }

// Detector looks for jobs under two roots, so that tests point them at
// fixture trees: CgroupRoot is where cgroup file systems are mounted
// (/sys/fs/cgroup), SpoolDir is slurmd's SlurmdSpoolDir (/var/spool/slurmd).
// Either may be empty to look at no such source.
type Detector struct {
	CgroupRoot string
	SpoolDir   string
}

// Defaults of the --slurm.cgroup-path and --slurm.spool-path flags.
const (
	DefaultCgroupRoot = "/sys/fs/cgroup"
	DefaultSpoolDir   = "/var/spool/slurmd"
)

// v1Controllers are the cgroup v1 hierarchies Slurm's plugins create
// slurm/ under (proctrack/cgroup uses freezer, task/cgroup cpuset, memory
// and devices, jobacct_gather/cgroup cpuacct). Any one seeing the job is
// enough; the first that holds a slurm/ directory is read.
var v1Controllers = []string{"freezer", "memory", "cpuset", "devices", "cpuacct", "cpu,cpuacct", "pids"}

// Look reads the sources once.
func (d Detector) Look() Observation {
	var o Observation
	seen := map[Job]bool{}
	add := func(source string, ids []string, err error, present bool) {
		if err != nil {
			o.Errs = append(o.Errs, err)
		}
		if !present {
			return
		}
		o.Sources = append(o.Sources, source)
		for _, id := range ids {
			j := Job{ID: id, Source: source}
			if !seen[j] {
				seen[j] = true
				o.Jobs = append(o.Jobs, j)
			}
		}
	}
	if d.CgroupRoot != "" {
		ids, present, err := cgroupV2Jobs(d.CgroupRoot)
		add(SourceCgroupV2, ids, err, present)
		ids, present, err = cgroupV1Jobs(d.CgroupRoot)
		add(SourceCgroupV1, ids, err, present)
	}
	if d.SpoolDir != "" {
		ids, present, err := spoolJobs(d.SpoolDir)
		add(SourceSpool, ids, err, present)
	}
	slices.SortFunc(o.Jobs, func(a, b Job) int {
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return o
}

// readDir lists dir; a directory that does not exist (or is a file) is
// absent (present false, no error), any other failure is an error naming
// the directory.
func readDir(dir string) (entries []fs.DirEntry, present bool, err error) {
	entries, err = os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("listing Slurm jobs in %s: %w", dir, err)
	}
	return entries, true, nil
}

// cgroupV2Jobs lists the job directories of every slurmstepd scope under
// system.slice.
func cgroupV2Jobs(root string) (ids []string, present bool, err error) {
	slice := filepath.Join(root, "system.slice")
	entries, ok, err := readDir(slice)
	if !ok {
		return nil, false, err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !IsStepdScope(e.Name()) {
			continue
		}
		jobs, ok, err := readDir(filepath.Join(slice, e.Name()))
		if err != nil {
			errs = append(errs, err)
		}
		if !ok {
			continue
		}
		present = true
		for _, j := range jobs {
			if id, ok := CgroupV2JobID(j.Name()); ok && j.IsDir() {
				ids = append(ids, id)
			}
		}
	}
	return ids, present, errors.Join(errs...)
}

// cgroupV1Jobs lists slurm/uid_*/job_* under the first v1 controller that
// has a slurm directory.
func cgroupV1Jobs(root string) (ids []string, present bool, err error) {
	var errs []error
	for _, ctrl := range v1Controllers {
		dir := filepath.Join(root, ctrl)
		tops, ok, err := readDir(dir)
		if err != nil {
			errs = append(errs, err)
		}
		if !ok {
			continue
		}
		for _, top := range tops {
			// slurm, or slurm_<node> under --enable-multiple-slurmd.
			if !top.IsDir() || (top.Name() != "slurm" && !strings.HasPrefix(top.Name(), "slurm_")) {
				continue
			}
			uids, ok, err := readDir(filepath.Join(dir, top.Name()))
			if err != nil {
				errs = append(errs, err)
			}
			if !ok {
				continue
			}
			present = true
			for _, u := range uids {
				if !u.IsDir() || !isNumberAfter(u.Name(), "uid_") {
					continue
				}
				jobs, _, err := readDir(filepath.Join(dir, top.Name(), u.Name()))
				if err != nil {
					errs = append(errs, err)
				}
				for _, j := range jobs {
					if id, ok := strings.CutPrefix(j.Name(), "job_"); ok && j.IsDir() && isNumber(id) {
						ids = append(ids, id)
					}
				}
			}
		}
		if present {
			// Every controller holds the same jobs; one is enough.
			break
		}
	}
	return ids, present, errors.Join(errs...)
}

// spoolJobs lists the job ids of the step sockets in the spool directory.
func spoolJobs(dir string) (ids []string, present bool, err error) {
	entries, ok, err := readDir(dir)
	if !ok {
		return nil, false, err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if job, _, ok := ParseStepSocket(e.Name()); ok {
			ids = append(ids, job)
		}
	}
	return ids, true, nil
}

// IsStepdScope reports whether name is slurmstepd's systemd scope:
// slurmstepd.scope, or <node>_slurmstepd.scope on a multiple-slurmd build.
func IsStepdScope(name string) bool {
	return name == "slurmstepd.scope" || (strings.HasSuffix(name, "_slurmstepd.scope") && len(name) > len("_slurmstepd.scope"))
}

// CgroupV2JobID returns the job id a directory under slurmstepd.scope is
// named by: the number of job_<id>, or the SLUID itself. The scope's own
// "system" directory and anything else are not jobs.
func CgroupV2JobID(name string) (string, bool) {
	if id, ok := strings.CutPrefix(name, "job_"); ok {
		return id, isNumber(id)
	}
	return name, IsSLUID(name)
}

// sluidAlphabet is Crockford's base32, in which Slurm prints a SLUID.
const sluidAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// IsSLUID reports whether name is a SLUID as Slurm 26.05 prints it and
// names job cgroups by: "s" and 13 characters of Crockford's base32, such
// as sEKNKTV3WPV500 (cgroup.conf(5), CgroupJobIdPaths).
func IsSLUID(name string) bool {
	if len(name) != 14 || name[0] != 's' {
		return false
	}
	for _, c := range name[1:] {
		if !strings.ContainsRune(sluidAlphabet, c) {
			return false
		}
	}
	return true
}

// ParseStepSocket parses a slurmstepd socket name, <node>_<jobid>.<stepid>
// or <node>_<jobid>.<stepid>.<het component>, into its job and step ids.
// The node name may itself contain '_', so the ids follow the last one.
// Step ids are uint32: batch, extern and interactive steps are the top
// values (4294967294, 4294967295, 4294967290).
func ParseStepSocket(name string) (job, step string, ok bool) {
	i := strings.LastIndexByte(name, '_')
	if i < 1 {
		return "", "", false
	}
	parts := strings.Split(name[i+1:], ".")
	if len(parts) != 2 && len(parts) != 3 {
		return "", "", false
	}
	for _, p := range parts {
		if !isUint32(p) {
			return "", "", false
		}
	}
	return parts[0], parts[1], true
}

func isNumberAfter(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	return ok && isNumber(rest)
}

// isNumber is a non-empty run of ASCII digits.
func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isUint32 is a decimal number that fits a uint32, written as Slurm
// prints one (no sign, no leading '+').
func isUint32(s string) bool {
	if !isNumber(s) {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}
