package mfscluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// emptyMetadata is the empty file system moosefs-master ships; the
// master refuses to start without a metadata file.
const emptyMetadata = "/var/lib/mfs/metadata.mfs.empty"

// Every daemon runs as root (WORKING_USER) on its own DATA_PATH and at
// nice 0: the packages' default of -19 would let the servers starve the
// test on two cores.
func masterConfig(data string) string {
	return fmt.Sprintf(`WORKING_USER = root
WORKING_GROUP = root
NICE_LEVEL = 0
DATA_PATH = %[1]s
EXPORTS_FILENAME = %[1]s/mfsexports.cfg
TOPOLOGY_FILENAME = %[1]s/mfstopology.cfg
`, data)
}

// masterExports lets every client mount the whole tree read-write as an
// admin (storage classes need admin) with root kept root.
const masterExports = "*\t/\trw,alldirs,admin,maproot=0:0\n"

func chunkServerConfig(data, label, master string) string {
	return fmt.Sprintf(`WORKING_USER = root
WORKING_GROUP = root
NICE_LEVEL = 0
DATA_PATH = %[1]s
HDD_CONF_FILENAME = %[1]s/mfshdd.cfg
LABELS = %[2]s
MASTER_HOST = %[3]s
`, data, label, master)
}

func writeFiles(files map[string]string) error {
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startMaster(t testing.TB) {
	t.Helper()
	h := c.Master
	data := filepath.Join(h.dir, "var")
	meta, err := os.ReadFile(emptyMetadata)
	if err == nil {
		err = os.Mkdir(data, 0o755)
	}
	if err == nil {
		err = writeFiles(map[string]string{
			filepath.Join(data, "metadata.mfs"):    string(meta),
			filepath.Join(data, "mfsexports.cfg"):  masterExports,
			filepath.Join(data, "mfstopology.cfg"): "",
			filepath.Join(h.dir, "mfsmaster.cfg"):  masterConfig(data),
		})
	}
	if err != nil {
		t.Fatalf("master: %v", err)
	}
	h.startDaemon(t, []string{h.cpu.procsFile()}, "mfsmaster", "-c", filepath.Join(h.dir, "mfsmaster.cfg"), "-f")
}

func (c *Cluster) startChunkServer(t testing.TB, cs *ChunkServer, opts Options) {
	t.Helper()
	diskDir, data := filepath.Join(cs.dir, "disk"), filepath.Join(cs.dir, "var")
	for _, d := range []string{diskDir, data} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("chunkserver %s: %v", cs.Name, err)
		}
	}
	cs.Disk = probetest.MountLoopIn(t, diskDir, opts.FSType, opts.DiskSize)
	// A folder on the disk, not its root, as README.Debian advises: an
	// unmounted disk then shows as a missing folder, not an empty one.
	chunks := filepath.Join(cs.Disk.Mount, "chunks")
	cs.io = probetest.NewIOCgroup(t, cs.Disk.DevNum)
	cs.diskRate = opts.DiskRate
	if err := cs.io.Throttle(cs.diskRate); err != nil {
		t.Fatalf("chunkserver %s: %v", cs.Name, err)
	}
	if err := os.Mkdir(chunks, 0o755); err != nil {
		t.Fatalf("chunkserver %s: %v", cs.Name, err)
	}
	if err := writeFiles(map[string]string{
		filepath.Join(data, "mfshdd.cfg"):           chunks + "\n",
		filepath.Join(cs.dir, "mfschunkserver.cfg"): chunkServerConfig(data, cs.Label, c.Master.Addr),
	}); err != nil {
		t.Fatalf("chunkserver %s: %v", cs.Name, err)
	}
	cs.startDaemon(t, []string{cs.cpu.procsFile(), cs.io.ProcsFile()}, "mfschunkserver", "-c", filepath.Join(cs.dir, "mfschunkserver.cfg"), "-f")
}

// serverState is one row of the master's chunkserver list.
type serverState struct {
	addr, labels string
	total        int64
}

// chunkServersSeen lists the chunkservers the master knows (mfscli -SCS,
// run in the master's namespace).
func (c *Cluster) chunkServersSeen() ([]serverState, error) {
	out, err := c.Master.Run("mfscli", "-H", c.Master.Addr, "-SCS", "-p")
	if err != nil {
		return nil, err
	}
	var seen []serverState
	for _, line := range strings.Split(out, "\n") {
		// chunk servers: ip port id labels version load maintenance chunks used total ...
		f := strings.Split(line, "\t")
		if len(f) < 11 || f[0] != "chunk servers:" {
			continue
		}
		total, _ := strconv.ParseInt(f[10], 10, 64)
		seen = append(seen, serverState{addr: f[1], labels: f[4], total: total})
	}
	return seen, nil
}

// waitChunkServers waits until the master lists every chunkserver with
// its label and its disk scanned (total space known).
func (c *Cluster) waitChunkServers(t testing.TB) {
	t.Helper()
	var last string
	probetest.PollUntil(t, "the master to see every chunkserver", 200*time.Millisecond, readyTimeout, func() bool {
		c.failIfExited(t)
		seen, err := c.chunkServersSeen()
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprint(seen)
		ready := 0
		for _, cs := range c.ChunkServers {
			for _, s := range seen {
				if s.addr == cs.Addr && s.labels == cs.Label && s.total > 0 {
					ready++
				}
			}
		}
		return ready == len(c.ChunkServers)
	})
	t.Logf("master sees %s", last)
}

// failIfExited fails the test when a daemon has died during bring-up.
func (c *Cluster) failIfExited(t testing.TB) {
	t.Helper()
	for _, h := range c.hosts() {
		if h.daemon == nil {
			continue
		}
		if done, err := h.daemon.exited(); done {
			t.Fatalf("%s exited during bring-up (%v):\n%s", h.daemon.name, err, tail(h.daemon.log.String(), 40))
		}
	}
}

func (c *Cluster) hosts() []*Host {
	hs := []*Host{c.Master}
	for _, cs := range c.ChunkServers {
		hs = append(hs, cs.Host)
	}
	for _, cl := range c.Clients {
		hs = append(hs, cl.Host)
	}
	return hs
}

// mountClient starts mfsmount in the foreground from the client's
// network namespace, without the kernel's page cache (mfscachemode=
// DIRECT, so reads reach the chunkservers), and waits until the mount
// answers statfs with the cluster's space.
func (c *Cluster) mountClient(t testing.TB, cl *Client) {
	t.Helper()
	cl.Mount = filepath.Join(cl.dir, "mnt")
	if err := os.Mkdir(cl.Mount, 0o755); err != nil {
		t.Fatalf("client %s: %v", cl.Name, err)
	}
	cl.startDaemon(t, []string{cl.cpu.procsFile()}, "mfsmount", cl.Mount, "-f", "-H", c.Master.Addr, "-o", "mfscachemode=DIRECT")
	// Registered after the daemon's stop, so it runs before it: an
	// unmounted mfsmount exits by itself.
	t.Cleanup(func() {
		if err := unmount(cl.Mount); err != nil {
			t.Errorf("client %s: %v", cl.Name, err)
		}
	})
	probetest.PollUntil(t, "client "+cl.Name+"'s mount to answer", 100*time.Millisecond, readyTimeout, func() bool {
		c.failIfExited(t)
		var st unix.Statfs_t
		return unix.Statfs(cl.Mount, &st) == nil && st.Type == fuseSuperMagic && st.Blocks > 0
	})
}

// unmount unmounts a client's mount with umount(2), retrying for 10 s
// while it is busy, then detaching it. Not umount(8): it stats the path
// first, and on a mount whose master does not answer that stat hangs
// for as long as mfsmount retries.
func unmount(mnt string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Unmount(mnt, 0)
		if err == nil || errors.Is(err, unix.EINVAL) {
			return nil // unmounted, or not mounted (any more)
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting %s: %w", mnt, err)
	}
	return nil
}

// fuseSuperMagic is FUSE's f_type in statfs(2).
const fuseSuperMagic = 0x65735546

// PinDir gives dir (a path under the client's mount) a strict storage
// class "on<label>" that keeps one copy of each chunk on the chunkserver
// labelled label and never elsewhere, creating the class on first use.
// A probe in dir then measures that one server.
func (cl *Client) PinDir(dir, label string) error {
	class := "on" + label
	if _, err := cl.Run("mfsscadmin", cl.Mount, "create", "-m", "s", "-K", label, class); err != nil && !strings.Contains(err.Error(), "already in use") {
		return fmt.Errorf("pinning %s to %s: %w", dir, label, err)
	}
	if _, err := cl.Run("mfssetsclass", class, dir); err != nil {
		return fmt.Errorf("pinning %s to %s: %w", dir, label, err)
	}
	return nil
}

// Chunk is one chunk of a file and the chunkservers holding a valid copy.
type Chunk struct {
	Index int
	// Servers are the holders' addresses.
	Servers []string
}

// Chunks lists a file's chunks and where their valid copies are, as
// mfsfileinfo run on the client says.
func (cl *Client) Chunks(path string) ([]Chunk, error) {
	out, err := cl.Run("mfsfileinfo", path)
	if err != nil {
		return nil, err
	}
	return parseFileInfo(out)
}

// parseFileInfo reads mfsfileinfo's output:
//
//	/path:
//		chunk 0: 0000000000000001_00000001 / (id:1 ver:1)
//			copy 1: 10.231.0.12:9422 (status:VALID)
func parseFileInfo(out string) ([]Chunk, error) {
	var chunks []Chunk
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "chunk":
			i, err := strconv.Atoi(strings.TrimSuffix(f[1], ":"))
			if err != nil {
				return nil, fmt.Errorf("mfsfileinfo: chunk line %q: %w", line, err)
			}
			chunks = append(chunks, Chunk{Index: i})
		case len(f) >= 3 && f[0] == "copy":
			if len(chunks) == 0 {
				return nil, fmt.Errorf("mfsfileinfo: copy before any chunk: %q", line)
			}
			if !strings.Contains(line, "status:VALID") {
				continue
			}
			addr, _, _ := strings.Cut(f[2], ":")
			chunks[len(chunks)-1].Servers = append(chunks[len(chunks)-1].Servers, addr)
		}
	}
	return chunks, nil
}

// ChunkServerAt is the chunkserver with address addr, or nil.
func (c *Cluster) ChunkServerAt(addr string) *ChunkServer {
	for _, cs := range c.ChunkServers {
		if cs.Addr == addr {
			return cs
		}
	}
	return nil
}

// ThrottleDisk limits the chunkserver's reads and writes of its own
// device to bytesPerSec (blkio throttle of the cgroup holding
// mfschunkserver); 0 lifts the limit, back to the device's own rate (Options.DiskRate, or
// none). What it slows, as measured here:
//
//   - Reads that miss the page cache. ThrottleDisk evicts the
//     chunkserver's cached chunks (DropCache), so the next read of each
//     chunk comes from the device at the throttled rate; a chunk read or
//     written after that is cached again and served at memory speed.
//   - Writes, because while throttled the chunkserver's file system is
//     remounted sync: cgroup v1 charges a write to the cgroup only when
//     the writer's own thread submits it, never the kernel's writeback,
//     so without sync the page cache absorbs every write.
func (cs *ChunkServer) ThrottleDisk(bytesPerSec int64) error {
	bytesPerSec = max(bytesPerSec, 0)
	syncOpt := "sync"
	if bytesPerSec == 0 {
		syncOpt = "async"
		bytesPerSec = cs.diskRate
	}
	if out, err := runOut("mount", "-o", "remount,"+syncOpt, cs.Disk.Mount); err != nil {
		return fmt.Errorf("chunkserver %s: remounting its disk %s: %v: %s", cs.Name, syncOpt, err, out)
	}
	if err := cs.io.Throttle(bytesPerSec); err != nil {
		return fmt.Errorf("chunkserver %s: %w", cs.Name, err)
	}
	if syncOpt == "sync" {
		return cs.DropCache()
	}
	return nil
}

// DropCache writes the chunkserver's dirty chunk data to its device and
// evicts its chunk files from the page cache (POSIX_FADV_DONTNEED), so
// that the next reads of them reach the device. Only this chunkserver's
// files are touched.
func (cs *ChunkServer) DropCache() error {
	root, err := os.Open(cs.Disk.Mount)
	if err != nil {
		return fmt.Errorf("chunkserver %s: %w", cs.Name, err)
	}
	defer root.Close()
	if err := unix.Syncfs(int(root.Fd())); err != nil {
		return fmt.Errorf("chunkserver %s: syncfs %s: %w", cs.Name, cs.Disk.Mount, err)
	}
	var errs []error
	walkErr := filepath.WalkDir(cs.Disk.Mount, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a chunk deleted under us is not a failure
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			// A chunk deleted under us is not a failure.
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return nil
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			errs = append(errs, fmt.Errorf("fadvise %s: %w", path, err))
		}
		return nil
	})
	if err := errors.Join(append(errs, walkErr)...); err != nil {
		return fmt.Errorf("chunkserver %s: dropping its cache: %w", cs.Name, err)
	}
	return nil
}
