//go:build benchcluster

package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/procgroup"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/scrape"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

const (
	// Example values in the by-hand commands; a person changes them.
	exampleNetRate  = 5_000_000
	exampleDiskRate = 5_000_000
	exampleCPU      = 0.1

	// exporterStopTimeout is how long an exporter has to exit on SIGTERM.
	exporterStopTimeout = 20 * time.Second
	// tailLines is how much of an exporter's log a person reads when it
	// exits.
	tailLines = 30
)

// exporter is the plateau_exporter of one client.
type exporter struct {
	client *mfscluster.Client
	// url is where it serves, root path: http://127.0.0.1:PORT.
	url string
	// probeDir is the directory it works in, under its client's mount.
	probeDir string
	log      string
	proc     *procgroup.Proc
}

func (e *exporter) exited() bool { return e.proc.Exited() }

func TestBenchCluster(t *testing.T) {
	set, err := settingsFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(set.exporter); err != nil {
		t.Fatalf("no plateau_exporter to deploy (%v): run `make build` first (bench/cluster.sh does)", err)
	}
	stop := notifyStop(t)
	// Registered before the cluster's cleanups, so it runs after all of
	// them: what it lists survived the whole teardown.
	var c *mfscluster.Cluster
	var down time.Time
	t.Cleanup(func() {
		var took time.Duration
		if !down.IsZero() {
			took = time.Since(down)
		}
		reportLeftovers(t, c, took)
	})

	begin := time.Now()
	c = mfscluster.Start(t, set.opts)
	if stop.pending() {
		down = time.Now()
		return
	}
	// Runs once the exporters have stopped and every fault is lifted,
	// before the cluster goes.
	t.Cleanup(func() { fmt.Printf("MooseFS space at the end: %s\n", space(c)) })
	prepareProbeRoot(t, c)
	exporters := startExporters(t, c, set)
	// Registered after the exporters, so it runs before they stop: a
	// fault a person left on (a frozen master) would hang their probes'
	// teardown. mfscluster lifts them again, later, for its own daemons.
	t.Cleanup(func() { liftFaults(t, c) })
	if stop.pending() {
		down = time.Now()
		return
	}
	up := time.Since(begin)
	fmt.Print(describe(c, exporters, set, up))
	fmt.Printf("\nMooseFS space at the start: %s\n", startSpace(c, set))
	stop.up.Store(true)

	var holdOver <-chan time.Time
	if set.hold > 0 {
		holdOver = time.After(set.hold)
		fmt.Printf("\nUp. HOLD=%s: it tears down by itself at %s, or on Ctrl-C (kill -INT or -TERM %d).\n", set.hold, time.Now().Add(set.hold).Format("15:04:05"), os.Getpid())
	} else {
		fmt.Printf("\nUp. Ctrl-C (kill -INT or -TERM %d) tears everything down.\n", os.Getpid())
	}
	watch(t, exporters, set, stop.c, holdOver)
	down = time.Now()
}

// stopper says when to tear down: c receives the first SIGINT or
// SIGTERM. Later ones only say that the teardown is still running:
// stopping it halfway would leave namespaces, mounts and loop devices
// behind. up is set once the cluster is up; until then a signal waits
// for the bring-up to finish.
type stopper struct {
	c  chan os.Signal
	up atomic.Bool
}

// pending says whether a signal came during the bring-up, which then
// ends without telling how to use a cluster about to go.
func (st *stopper) pending() bool {
	select {
	case <-st.c:
		return true
	default:
		return false
	}
}

// notifyStop catches SIGINT and SIGTERM until every other cleanup has
// run.
func notifyStop(t *testing.T) *stopper {
	st := &stopper{c: make(chan os.Signal, 1)}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		defer close(done)
		first := true
		for s := range sigs {
			name := map[os.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[s]
			switch {
			case !first:
				fmt.Printf("%s: still tearing down; wait for the list of leftovers.\n", name)
			case st.up.Load():
				fmt.Printf("\n%s: tearing everything down.\n", name)
			default:
				fmt.Printf("\n%s: tearing everything down once the bring-up has finished.\n", name)
			}
			if first {
				first = false
				st.c <- s
			}
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sigs)
		close(sigs)
		<-done
	})
	return st
}

// prepareProbeRoot makes <mount>/plateau, the directory every exporter's
// target is, with trash time 0 and one copy per chunk, set before
// anything is created in it so that every probe file inherits them (as
// TestClusterFaults does).
func prepareProbeRoot(t *testing.T, c *mfscluster.Cluster) {
	t.Helper()
	cl := c.Clients[0]
	root := filepath.Join(cl.Mount, "plateau")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatalf("probe directory: %v", err)
	}
	for _, argv := range [][]string{{"mfssettrashtime", "-r", "0", root}, {"mfssetgoal", "-r", "1", root}} {
		if _, err := cl.Run(argv[0], argv[1:]...); err != nil {
			t.Fatal(err)
		}
	}
}

// startExporters starts a plateau_exporter per client, on this machine
// (the FUSE mount is in the machine's mount namespace; its traffic goes
// through the client's mfsmount, so the client's faults are its), each
// on a free 127.0.0.1 port, and waits until each answers. Their files
// are under the cluster's directory, so Leftovers sees a survivor.
func startExporters(t *testing.T, c *mfscluster.Cluster, set settings) []*exporter {
	t.Helper()
	dir := filepath.Join(c.Dir, "exporters")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("exporters' directory: %v", err)
	}
	var exps []*exporter
	for _, cl := range c.Clients {
		config := filepath.Join(dir, cl.Name+".yml")
		// No baselines: the exporters export what each run measured; a
		// baseline is for the ratios and alerts of TestClusterFaults.
		if err := os.WriteFile(config, []byte(exporterConfig(set, cl.Mount, filepath.Join(dir, "baselines.yml"))), 0o644); err != nil {
			t.Fatalf("exporter config of %s: %v", cl.Name, err)
		}
		addr := probetest.FreeAddr(t)
		e := &exporter{
			client: cl, url: "http://" + addr, probeDir: filepath.Join(cl.Mount, "plateau", cl.Name),
			log: filepath.Join(dir, cl.Name+".log"),
		}
		e.start(t, set.exporter, "--config.file="+config, "--probe.hostname="+cl.Name,
			"--probe.history-file="+filepath.Join(dir, cl.Name+"-history.json"),
			"--collector.disable-defaults", "--web.listen-address="+addr)
		exps = append(exps, e)
	}
	for _, e := range exps {
		probetest.PollUntil(t, "the exporter of "+e.client.Name+" to answer", 200*time.Millisecond, time.Minute, func() bool {
			if e.exited() {
				t.Fatalf("the exporter of %s exited while starting; its log (%s):\n%s", e.client.Name, e.log, procgroup.TailFile(e.log, tailLines))
			}
			_, err := alertstack.HTTPGet(e.url + "/-/healthy")
			return err == nil
		})
	}
	return exps
}

// start starts the exporter in a process group of its own, so that a
// Ctrl-C reaches only the test, which stops it in order; it dies with
// the test if the test is killed (Pdeathsig). Cleanup stops it (procgroup):
// SIGTERM, then SIGKILL to the group after exporterStopTimeout, which is
// an error.
func (e *exporter) start(t *testing.T, argv0 string, args ...string) {
	t.Helper()
	cmd := exec.Command(argv0, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	e.proc = procgroup.Start(t, cmd, procgroup.Options{Name: "the exporter of " + e.client.Name, Log: e.log,
		TailLines: tailLines, Grace: exporterStopTimeout, SlowStopFails: true})
}

// describe is what a person reads once the cluster is up: the hosts, the
// exporters, how to run a command on a host and how to put each fault on
// one host by hand.
func describe(c *mfscluster.Cluster, exps []*exporter, set settings, up time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nMooseFS bench cluster %s up in %s: 1 master, %d chunkservers, %d clients. Its files: %s\n\n",
		c.ID, up.Round(time.Second), len(c.ChunkServers), len(c.Clients), c.Dir)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "HOST\tADDRESS\tROLE\tPID\tNETWORK NAMESPACE\tMOUNT POINT\tEXPORTER")
	fmt.Fprintf(w, "%s\t%s\tmaster (mfsmaster)\t%d\t%s\t-\t-\n", c.Master.Name, c.Master.Addr, c.Master.Pid(), c.Master.NetNS)
	for _, cs := range c.ChunkServers {
		fmt.Fprintf(w, "%s\t%s\tchunkserver %s (mfschunkserver), disk %s\t%d\t%s\t%s\t-\n",
			cs.Name, cs.Addr, cs.Label, cs.Disk.Device, cs.Pid(), cs.NetNS, cs.Disk.Mount)
	}
	for _, e := range exps {
		cl := e.client
		fmt.Fprintf(w, "%s\t%s\tclient (mfsmount)\t%d\t%s\t%s\t%s/metrics\n", cl.Name, cl.Addr, cl.Pid(), cl.NetNS, cl.Mount, e.url)
	}
	w.Flush()

	fmt.Fprintf(&b, "\nEach exporter runs on this machine, not in a namespace, and probes its own directory,\n"+
		"<mount point>/plateau/<host>, through its client's mount, every %s (seq: %s a run; md: %d empty files).\n"+
		"Its config and log are in %s. For example:\n  curl -s %s/metrics | grep '^plateau_probe_success'\n",
		set.interval, probe.FormatSize(seqFileSize), mdFiles, filepath.Join(c.Dir, "exporters"), exps[0].url)
	fmt.Fprintf(&b, "\nRun a command on a host (its network and hostname), e.g. the master's view of the chunkservers:\n  %s\n",
		c.Master.CommandLine("mfscli", "-H", c.Master.Addr, "-SCS"))

	fmt.Fprintf(&b, "\nFaults by hand, one host at a time, as root. The numbers are examples. Each is what the\n"+
		"mfscluster method in brackets does; the teardown lifts any fault left on.\n")
	put := func(f mfscluster.ByHand) {
		fmt.Fprintf(&b, "  %s (%s)\n", f.Fault, f.Method)
		for i, l := range f.On {
			fmt.Fprintf(&b, "    %-5s%s\n", map[bool]string{true: "on:", false: ""}[i == 0], l)
		}
		for i, l := range f.Off {
			fmt.Fprintf(&b, "    %-5s%s\n", map[bool]string{true: "off:", false: ""}[i == 0], l)
		}
	}
	host := func(h *mfscluster.Host, disk func()) {
		fmt.Fprintf(&b, "%s (%s)\n", h.Name, h.Addr)
		put(h.NetworkByHand(exampleNetRate))
		if disk != nil {
			disk()
		}
		put(h.CPUByHand(exampleCPU))
		put(h.FreezeByHand())
	}
	host(c.Master, nil)
	for _, cs := range c.ChunkServers {
		host(cs.Host, func() { put(cs.DiskByHand(exampleDiskRate)) })
	}
	for _, cl := range c.Clients {
		host(cl.Host, nil)
	}
	return b.String()
}

// watch waits for a signal or the end of HOLD. Meanwhile it reports each
// exporter's first results, once both its probes have run, and any
// exporter that exits.
func watch(t *testing.T, exps []*exporter, set settings, stop <-chan os.Signal, holdOver <-chan time.Time) {
	t.Helper()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	reported := map[*exporter]bool{}
	lateAt := time.Now().Add(set.interval + set.timeout() + 30*time.Second)
	late := false
	for {
		select {
		case <-stop:
			return
		case <-holdOver:
			fmt.Printf("\nHOLD=%s is over: tearing everything down.\n", set.hold)
			return
		case <-tick.C:
		}
		for _, e := range exps {
			if reported[e] {
				continue
			}
			if e.exited() {
				reported[e] = true
				t.Errorf("the exporter of %s exited; its log (%s):\n%s", e.client.Name, e.log, procgroup.TailFile(e.log, tailLines))
				continue
			}
			if line, ok := firstResults(e); ok {
				reported[e] = true
				fmt.Printf("%s: %s\n", e.client.Name, line)
			}
		}
		if !late && len(reported) < len(exps) && time.Now().After(lateAt) {
			late = true
			for _, e := range exps {
				if !reported[e] {
					fmt.Printf("%s: no result of both probes yet, %s after start; see %s\n", e.client.Name, set.interval+set.timeout(), e.log)
				}
			}
		}
	}
}

// firstResults says what the exporter's probes measured, once both have
// a result.
func firstResults(e *exporter) (string, bool) {
	fams, _, err := alertstack.ScrapeFamilies(e.url + "/metrics")
	if err != nil {
		return "", false
	}
	value := func(name string, labels map[string]string) (float64, bool) {
		return scrape.Value(fams, name, labels)
	}
	seqOK, ok1 := value("plateau_probe_success", map[string]string{"probe": "seq"})
	mdOK, ok2 := value("plateau_probe_success", map[string]string{"probe": "md"})
	if !ok1 || !ok2 {
		return "", false
	}
	line := fmt.Sprintf("first runs: seq success %g", seqOK)
	for _, op := range []string{"write", "read"} {
		if v, ok := value("plateau_probe_throughput_bytes_per_second", map[string]string{"probe": "seq", "op": op}); ok {
			line += fmt.Sprintf(", %s %.1f MB/s", op, v/1e6)
		}
	}
	line += fmt.Sprintf("; md success %g", mdOK)
	if v, ok := value("plateau_probe_operations_per_second", map[string]string{"probe": "md", "op": "create"}); ok {
		line += fmt.Sprintf(", %.0f creates/s", v)
	}
	return line, true
}

// liftFaults lifts every fault a person may have put on by hand, on
// every host: thaws, removes the network, CPU and disk throttles.
func liftFaults(t *testing.T, c *mfscluster.Cluster) {
	hosts := []*mfscluster.Host{c.Master}
	for _, cs := range c.ChunkServers {
		hosts = append(hosts, cs.Host)
	}
	for _, cl := range c.Clients {
		hosts = append(hosts, cl.Host)
	}
	for _, h := range hosts {
		for _, err := range []error{h.Thaw(), h.ThrottleNetwork(0), h.ThrottleCPU(0)} {
			if err != nil {
				t.Errorf("teardown: %v", err)
			}
		}
	}
	for _, cs := range c.ChunkServers {
		if err := cs.ThrottleDisk(0); err != nil {
			t.Errorf("teardown: %v", err)
		}
	}
}

// space is the cluster's space as the master counts it (mfscli -SIN),
// in one line. MooseFS 3.0 keeps every file removed through mfsmount as
// "sustained" for as long as the mount lives (TestClusterFaults measured
// it), so the probes' files fill the disks over time.
func space(c *mfscluster.Cluster) string {
	out, err := c.Master.Run("mfscli", "-H", c.Master.Addr, "-SIN", "-p")
	if err != nil {
		return err.Error()
	}
	info := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Split(line, "\t"); len(f) >= 3 && f[0] == "master info:" {
			info[f[1]] = f[2]
		}
	}
	if len(info) == 0 {
		return "mfscli -SIN said nothing"
	}
	mib := func(name string) int64 {
		v, _ := strconv.ParseInt(info[name], 10, 64)
		return v >> 20
	}
	return fmt.Sprintf("total %d MiB, available %d MiB, sustained %d MiB in %s files",
		mib("total space"), mib("avail space"), mib("sustained space"), info["sustained files"])
}

// startSpace is the chunkservers' space as the master lists them
// (mfscli -SCS: its -SIN totals lag for seconds after a chunkserver
// registers), and how long it lasts at the probes' rate.
func startSpace(c *mfscluster.Cluster, set settings) string {
	out, err := c.Master.Run("mfscli", "-H", c.Master.Addr, "-SCS", "-p")
	if err != nil {
		return err.Error()
	}
	var total, avail int64
	for _, line := range strings.Split(out, "\n") {
		// chunk servers: ip port id labels version load maintenance chunks used total ...
		f := strings.Split(line, "\t")
		if len(f) < 11 || f[0] != "chunk servers:" {
			continue
		}
		used, err1 := strconv.ParseInt(f[9], 10, 64)
		tot, err2 := strconv.ParseInt(f[10], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Sprintf("mfscli -SCS: unreadable line %q", line)
		}
		total, avail = total+tot, avail+tot-used
	}
	perHour := float64(len(c.Clients)) * seqFileSize * float64(time.Hour/set.interval)
	lasts := time.Duration((float64(avail) - minFreeRatio*float64(total)) / perHour * float64(time.Hour))
	return fmt.Sprintf("total %d MiB, available %d MiB.\n"+
		"The seq probes write %.0f MiB an hour, which MooseFS keeps (sustained) while the clients stay mounted:\n"+
		"the space lasts about %s, after which seq skips (min_free_ratio %g). DISK_SIZE or INTERVAL make it last longer.",
		total>>20, avail>>20, perHour/(1<<20), strings.TrimSuffix(lasts.Round(time.Minute).String(), "0s"), minFreeRatio)
}

// reportLeftovers prints what of the cluster survived the teardown, and
// fails the test if anything did.
func reportLeftovers(t *testing.T, c *mfscluster.Cluster, took time.Duration) {
	if c == nil {
		fmt.Println("The cluster did not come up; its own cleanups ran (see above for errors).")
		return
	}
	done := "Torn down."
	if took > 0 {
		done = fmt.Sprintf("Torn down in %s.", took.Round(100*time.Millisecond))
	}
	left := c.Leftovers()
	if len(left) == 0 {
		fmt.Printf("%s Leftovers of cluster %s: none.\n", done, c.ID)
		return
	}
	fmt.Printf("%s Leftovers of cluster %s:\n", done, c.ID)
	for _, l := range left {
		fmt.Printf("  %s\n", l)
	}
	t.Errorf("%d leftovers of cluster %s after the teardown", len(left), c.ID)
}
