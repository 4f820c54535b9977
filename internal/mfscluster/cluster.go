package mfscluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// Options says what cluster to build. Zero values take the defaults.
type Options struct {
	// ChunkServers is the number of data servers, labelled "A", "B", ...
	// (default 3, at most 26: labels must be letters).
	ChunkServers int
	// Clients is the number of mfsmount client hosts (default 2).
	Clients int
	// DiskSize is the size in bytes of each chunkserver's device (default
	// 1 GiB). A chunkserver leaves 256 MiB of each disk unused
	// (HDD_LEAVE_SPACE_DEFAULT), so less than 512 MiB is refused.
	DiskSize int64
	// FSType is the chunkservers' file system, "ext4" (default) or "xfs".
	FSType string
	// DiskRate, when not 0, is each chunkserver's device speed in bytes
	// per second each way, for the chunkserver: a blkio throttle of the
	// cgroup holding it, what "a tenth of its rate" (ThrottleDisk) is a
	// tenth of. The chunkserver's buffered writes are not charged to it
	// while its disk is not sync (see ThrottleDisk), so the clients' path
	// is as without it until a fault. ThrottleDisk(0) comes back to it.
	DiskRate int64
}

// LeaveSpace is what a chunkserver keeps unused on each of its disks
// (HDD_LEAVE_SPACE_DEFAULT in mfschunkserver.cfg, not set here): the
// master counts a disk's space less this, total and available alike.
const LeaveSpace = 256 << 20

const (
	defaultDiskSize = 1 << 30
	minDiskSize     = 2 * LeaveSpace
	// subnet is the cluster's /24. It exists only inside the cluster's
	// own namespaces (its switch and its hosts), so clusters never see
	// each other's addresses, nor the machine's.
	subnet = "10.231.0."
	// bridge is the switch namespace's bridge.
	bridge = "br0"
	// hostIf is each host's end of its veth, inside the host's namespace.
	hostIf = "eth0"
	// readyTimeout bounds each wait at bring-up: a loaded two-core
	// machine is slow, and the waits assert that a state comes.
	readyTimeout = 90 * time.Second
)

// Cluster is a running MooseFS cluster. Its fields are set by Start and
// never change.
type Cluster struct {
	// ID names the cluster's namespaces and cgroups ("mfsc-<ID>-...").
	ID string
	// Dir is the directory in RAM holding every host's configs, data,
	// logs, disk images and mount points.
	Dir string

	Master       *Host
	ChunkServers []*ChunkServer
	Clients      []*Client

	switchNS string
}

// Start brings a cluster up and returns once the master sees every
// chunkserver with its disk scanned and every client's mount answers.
// Every teardown is registered with t.Cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	probetest.RequireRoot(t)
	for cmd, pkg := range map[string]string{
		"mfsmaster": "moosefs-master", "mfschunkserver": "moosefs-chunkserver",
		"mfsmount": "moosefs-client", "mfscli": "moosefs-cli",
		"mfsscadmin": "moosefs-client", "ip": "iproute2", "tc": "iproute2",
		"nsenter": "util-linux",
	} {
		probetest.RequireCommand(t, cmd, pkg)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	c := &Cluster{ID: randomID(t), Dir: probetest.MemoryDir(t)}
	t.Logf("MooseFS cluster %s in %s: 1 master, %d chunkservers, %d clients", c.ID, c.Dir, opts.ChunkServers, opts.Clients)

	c.switchNS = c.nsName("switch")
	c.addNetNS(t, c.switchNS)
	c.run(t, "ip", "-n", c.switchNS, "link", "add", bridge, "type", "bridge")
	c.run(t, "ip", "-n", c.switchNS, "link", "set", bridge, "up")

	c.Master = c.newHost(t, "master", subnet+"1")
	for i := range opts.ChunkServers {
		label := string(rune('A' + i))
		cs := &ChunkServer{Host: c.newHost(t, "cs-"+strings.ToLower(label), fmt.Sprintf("%s%d", subnet, 11+i)), Label: label}
		c.ChunkServers = append(c.ChunkServers, cs)
	}
	for i := range opts.Clients {
		c.Clients = append(c.Clients, &Client{Host: c.newHost(t, fmt.Sprintf("client-%d", i), fmt.Sprintf("%s%d", subnet, 101+i))})
	}

	c.startMaster(t)
	for _, cs := range c.ChunkServers {
		c.startChunkServer(t, cs, opts)
	}
	c.waitChunkServers(t)
	t.Logf("master and %d chunkservers up after %s", len(c.ChunkServers), time.Since(begin).Round(time.Millisecond))
	for _, cl := range c.Clients {
		c.mountClient(t, cl)
	}
	// Registered last, so it runs first: a test that fails with a fault
	// on leaves it to the teardown, and a frozen master would hang every
	// unmount and every daemon's orderly exit.
	t.Cleanup(func() { c.liftFaults(t) })
	t.Logf("MooseFS cluster %s up in %s", c.ID, time.Since(begin).Round(time.Millisecond))
	return c
}

func (o Options) withDefaults() (Options, error) {
	if o.ChunkServers == 0 {
		o.ChunkServers = 3
	}
	if o.Clients == 0 {
		o.Clients = 2
	}
	if o.DiskSize == 0 {
		o.DiskSize = defaultDiskSize
	}
	if o.FSType == "" {
		o.FSType = "ext4"
	}
	switch {
	case o.ChunkServers < 1 || o.ChunkServers > 26:
		return o, fmt.Errorf("mfscluster: %d chunkservers: want 1 to 26 (one label letter each)", o.ChunkServers)
	case o.Clients < 1 || o.Clients > 100:
		return o, fmt.Errorf("mfscluster: %d clients: want 1 to 100", o.Clients)
	case o.DiskSize < minDiskSize:
		return o, fmt.Errorf("mfscluster: disk size %d bytes: want at least %d (a chunkserver leaves 256 MiB of each disk unused)", o.DiskSize, minDiskSize)
	case o.FSType != "ext4" && o.FSType != "xfs":
		return o, fmt.Errorf("mfscluster: file system %q: want ext4 or xfs", o.FSType)
	case o.DiskRate < 0:
		return o, fmt.Errorf("mfscluster: disk rate %d bytes per second: want 0 (none) or more", o.DiskRate)
	}
	return o, nil
}

func randomID(t testing.TB) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// nsName is the name under /run/netns of one of the cluster's namespaces.
func (c *Cluster) nsName(host string) string { return "mfsc-" + c.ID + "-" + host }

// run runs a command on the machine, failing the test on error.
func (c *Cluster) run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return probetest.Run(t, name, args...)
}

// addNetNS creates a network namespace and deletes it in cleanup, which
// also deletes every interface in it.
func (c *Cluster) addNetNS(t testing.TB, ns string) {
	t.Helper()
	c.run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := runOut("ip", "netns", "del", ns); err != nil {
			t.Errorf("deleting network namespace %s: %v: %s", ns, err, out)
		}
	})
}

// newHost makes a host: its network namespace, a veth pair whose one end
// (eth0, with addr) is in it and whose other end, named like the host, is
// on the switch's bridge, and its cgroups. Both ends are created in
// their namespaces, so no interface ever appears in the machine's own.
func (c *Cluster) newHost(t testing.TB, name, addr string) *Host {
	t.Helper()
	h := &Host{Name: name, Addr: addr, NetNS: c.nsName(name), dir: filepath.Join(c.Dir, name), switchNS: c.switchNS}
	if err := os.Mkdir(h.dir, 0o755); err != nil {
		t.Fatalf("host %s: %v", name, err)
	}
	c.addNetNS(t, h.NetNS)
	c.run(t, "ip", "link", "add", "name", name, "netns", c.switchNS, "type", "veth", "peer", "name", hostIf, "netns", h.NetNS)
	c.run(t, "ip", "-n", c.switchNS, "link", "set", "dev", name, "master", bridge, "up")
	c.run(t, "ip", "-n", h.NetNS, "link", "set", "lo", "up")
	c.run(t, "ip", "-n", h.NetNS, "addr", "add", addr+"/24", "dev", hostIf)
	c.run(t, "ip", "-n", h.NetNS, "link", "set", hostIf, "up")
	h.cpu = newCPUCgroup(t, "mfsc-"+c.ID+"-"+name)
	return h
}

// liftFaults thaws every daemon and lifts every throttle.
func (c *Cluster) liftFaults(t testing.TB) {
	for _, h := range c.hosts() {
		if done, _ := h.daemon.exited(); !done {
			if err := h.Thaw(); err != nil {
				t.Errorf("teardown: %v", err)
			}
		}
		if err := h.ThrottleNetwork(0); err != nil {
			t.Errorf("teardown: %v", err)
		}
		if err := h.ThrottleCPU(0); err != nil {
			t.Errorf("teardown: %v", err)
		}
	}
	for _, cs := range c.ChunkServers {
		if err := cs.ThrottleDisk(0); err != nil {
			t.Errorf("teardown: %v", err)
		}
	}
}

// Leftovers lists what of the cluster still exists: network namespaces,
// mounts and loop devices under Dir, processes started from Dir, cgroups.
// After the test that started the cluster has finished (its cleanups have
// run) it should be empty.
func (c *Cluster) Leftovers() []string {
	var left []string
	under := c.Dir + "/"
	if out, err := runOut("ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "mfsc-"+c.ID+"-") {
				left = append(left, "network namespace "+f[0])
			}
		}
	} else {
		left = append(left, fmt.Sprintf("ip netns list: %v", err))
	}
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], under) {
				left = append(left, "mount "+f[4])
			}
		}
	}
	if files, err := filepath.Glob("/sys/block/loop*/loop/backing_file"); err == nil {
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), under) {
				left = append(left, "loop device "+strings.Split(f, "/")[3]+" on "+strings.TrimSpace(string(b)))
			}
		}
	}
	if cmdlines, err := filepath.Glob("/proc/[0-9]*/cmdline"); err == nil {
		for _, f := range cmdlines {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), under) {
				left = append(left, "process "+strings.Split(f, "/")[2]+": "+strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*/mfsc-" + c.ID + "-*", "/sys/fs/cgroup/blkio/plateau-test-*"} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			if strings.Contains(d, "plateau-test-") && !c.ownsIOCgroup(d) {
				continue
			}
			left = append(left, "cgroup "+d)
		}
	}
	if _, err := os.Stat(c.Dir); err == nil {
		left = append(left, "directory "+c.Dir)
	}
	return left
}

// ownsIOCgroup says whether a blkio cgroup made by probetest is one of
// this cluster's chunkservers'.
func (c *Cluster) ownsIOCgroup(dir string) bool {
	for _, cs := range c.ChunkServers {
		if cs.io != nil && strings.HasSuffix(cs.io.ProcsFile(), "/"+filepath.Base(dir)+"/cgroup.procs") {
			return true
		}
	}
	return false
}
