package collector

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
)

// The scrape benchmark builds a large node at run time: 8 InfiniBand ports,
// 24 NVMe controllers, 4 GPFS file systems (89 disks) and 40 NFS mounts,
// and apart from them a Lustre client of 512 OSTs.
// Nothing of it is committed.

// copyGPFSFixture copies fixtures/gpfs/<src> to dir/<dst>, where the fake
// GPFS commands (FAKE_GPFS_FIXTURES) or the daemon find it.
func copyGPFSFixture(t testing.TB, dir, dst, src string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(fixturePath(t, "gpfs", src))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, dst), data, mode); err != nil {
		t.Fatal(err)
	}
}

func benchWrite(b testing.TB, path, content string) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
}

func genInfiniBand(b testing.TB, sysRoot string) {
	counters := []string{
		"excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_link_integrity_errors",
		"multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_constraint_errors", "port_rcv_data",
		"port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
		"port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_packets",
		"port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets", "VL15_dropped",
	}
	for hca := 0; hca < 4; hca++ {
		dev := filepath.Join(sysRoot, "class", "infiniband", fmt.Sprintf("mlx5_%d", hca))
		benchWrite(b, filepath.Join(dev, "fw_ver"), "16.35.2000")
		benchWrite(b, filepath.Join(dev, "board_id"), "MT_0000000012")
		benchWrite(b, filepath.Join(dev, "hca_type"), "MT4119")
		benchWrite(b, filepath.Join(dev, "node_guid"), fmt.Sprintf("0c42:a103:00b4:1e%02x", hca))
		for port := 1; port <= 2; port++ {
			p := filepath.Join(dev, "ports", fmt.Sprint(port))
			benchWrite(b, filepath.Join(p, "link_layer"), "InfiniBand")
			benchWrite(b, filepath.Join(p, "state"), "4: ACTIVE")
			benchWrite(b, filepath.Join(p, "phys_state"), "5: LinkUp")
			benchWrite(b, filepath.Join(p, "rate"), "100 Gb/sec (4X EDR)")
			for i, c := range counters {
				benchWrite(b, filepath.Join(p, "counters", c), fmt.Sprint(1000003*(i+1)*(hca+port)))
			}
		}
	}
}

func genNVMe(b testing.TB, sysRoot string) {
	for i := 0; i < 24; i++ {
		name := fmt.Sprintf("nvme%d", i)
		d := filepath.Join(sysRoot, "class", "nvme", name)
		benchWrite(b, filepath.Join(d, "model"), "SAMSUNG MZQL23T8HCLS-00A07")
		benchWrite(b, filepath.Join(d, "serial"), fmt.Sprintf("S64HNE0T5%05d", i))
		benchWrite(b, filepath.Join(d, "firmware_rev"), "GDC5602Q")
		benchWrite(b, filepath.Join(d, "state"), "live")
		benchWrite(b, filepath.Join(d, "cntlid"), fmt.Sprint(i))
		transport := "pcie"
		if i >= 16 {
			transport = "rdma"
		}
		benchWrite(b, filepath.Join(d, "transport"), transport)
		ns := filepath.Join(d, name+"n1")
		benchWrite(b, filepath.Join(ns, "size"), "7501476528")
		benchWrite(b, filepath.Join(ns, "queue", "logical_block_size"), "4096")
		benchWrite(b, filepath.Join(ns, "nsid"), "1")
	}
}

// genMountstats writes 40 NFS mounts: NFSv3 ones with the 22 NFSv3
// operations and NFSv4.2 ones with nconnect=2 and the client's full list of
// about seventy operations, a realistic handful of them in use.
func genMountstats(b testing.TB, procRoot string) {
	v3 := strings.Fields("NULL GETATTR SETATTR LOOKUP ACCESS READLINK READ WRITE CREATE MKDIR SYMLINK MKNOD REMOVE RMDIR RENAME LINK READDIR READDIRPLUS FSSTAT FSINFO PATHCONF COMMIT")
	v4 := strings.Fields("NULL READ WRITE COMMIT OPEN OPEN_CONFIRM OPEN_NOATTR OPEN_DOWNGRADE CLOSE SETATTR FSINFO RENEW SETCLIENTID " +
		"SETCLIENTID_CONFIRM LOCK LOCKT LOCKU ACCESS GETATTR LOOKUP LOOKUP_ROOT REMOVE RENAME LINK SYMLINK CREATE PATHCONF " +
		"STATFS READLINK READDIR SERVER_CAPS DELEGRETURN GETACL SETACL FS_LOCATIONS RELEASE_LOCKOWNER SECINFO FSID_PRESENT " +
		"EXCHANGE_ID CREATE_SESSION DESTROY_SESSION SEQUENCE GET_LEASE_TIME RECLAIM_COMPLETE LAYOUTGET GETDEVICEINFO " +
		"LAYOUTCOMMIT LAYOUTRETURN SECINFO_NO_NAME TEST_STATEID FREE_STATEID GETDEVICELIST BIND_CONN_TO_SESSION " +
		"DESTROY_CLIENTID SEEK ALLOCATE DEALLOCATE LAYOUTSTATS CLONE COPY OFFLOAD_CANCEL LOOKUPP LAYOUTERROR COPY_NOTIFY " +
		"GETXATTR SETXATTR LISTXATTRS REMOVEXATTR READ_PLUS")
	used := map[string]bool{"GETATTR": true, "LOOKUP": true, "ACCESS": true, "READ": true, "WRITE": true,
		"COMMIT": true, "OPEN": true, "CLOSE": true, "SEQUENCE": true}
	var s strings.Builder
	s.WriteString("device proc mounted on /proc with fstype proc\ndevice /dev/sda2 mounted on / with fstype ext4\n")
	for m := 0; m < 40; m++ {
		ops, fstype, vers, xprts := v3, "nfs", "3", 1
		if m%2 == 1 {
			ops, fstype, vers, xprts = v4, "nfs4", "4.2", 2
		}
		fmt.Fprintf(&s, "device nfs%02d.example.org:/export/vol%02d mounted on /mnt/vol%02d with fstype %s statvers=1.1\n", m%4, m, m, fstype)
		fmt.Fprintf(&s, "\topts:\trw,vers=%s,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,local_lock=none,addr=10.10.1.%d\n", vers, m%4+5)
		s.WriteString("\tage:\t864000\n\tcaps:\tcaps=0x3ffbffff,wtmult=512,dtsize=1048576,bsize=0,namlen=255\n\tsec:\tflavor=1,pseudoflavor=1\n")
		s.WriteString("\tevents:\t52 226 0 0 1 13 398 0 0 331 0 47 0 0 77 0 0 77 0 0 0 0 0 0 0 0 0\n")
		fmt.Fprintf(&s, "\tbytes:\t%d %d 0 0 %d %d 295483 220\n", 1207640230+m, 893421+m, 1210214218+m, 901120+m)
		fmt.Fprintf(&s, "\tRPC iostats version: 1.1  p/v: 100003/%s (nfs)\n", vers[:1])
		for x := 0; x < xprts; x++ {
			fmt.Fprintf(&s, "\txprt:\ttcp %d 1 1 0 11 6429 6428 0 12154 3 64 6500 40\n", 800+x)
		}
		s.WriteString("\tper-op statistics\n")
		for i, op := range ops {
			if used[op] {
				n := 1000 * (i + 1)
				fmt.Fprintf(&s, "\t%12s: %d %d 0 %d %d 6 %d %d 0\n", op, n, n+1, n*128, n*112, n/3, n/3+5)
			} else {
				fmt.Fprintf(&s, "\t%12s: 0 0 0 0 0 0 0 0 0\n", op)
			}
		}
		s.WriteString("\n")
	}
	benchWrite(b, filepath.Join(procRoot, "4242", "mountstats"), s.String())
	if err := os.Symlink("4242", filepath.Join(procRoot, "self")); err != nil {
		b.Fatal(err)
	}
}

// genGPFS writes mmpmon output for 4 file systems and copies the fake
// commands' other fixtures; it returns the fixture directory.
func genGPFS(b testing.TB, dir string) {
	var s strings.Builder
	for i, fs := range benchFilesystems() {
		fmt.Fprintf(&s, "_fs_io_s_ _n_ 10.10.0.21 _nn_ c001 _rc_ 0 _t_ 1717171717 _tu_ 407431 _cl_ hpc.example.org _fs_ %s _d_ 48 "+
			"_br_ %d _bw_ %d _oc_ 2377656 _cc_ 2201576 _rdc_ 59420404 _wc_ 18874626 _dir_ 40971 _iu_ 544768\n", fs, 205607400434+i, 74839282351+i)
	}
	benchWrite(b, filepath.Join(dir, "fs_io_s.txt"), strings.TrimSuffix(s.String(), "\n"))
	genGPFSDiag(b, dir)
	for _, f := range []string{"mmgetstate.txt", "mmhealth.txt", "mmdiag-waiters.txt", "mmfsadm-verbs.txt"} {
		data, err := os.ReadFile(filepath.Join("fixtures", "gpfs", f))
		if err != nil {
			b.Fatal(err)
		}
		benchWrite(b, filepath.Join(dir, f), strings.TrimSuffix(string(data), "\n"))
	}
}

// benchFilesystems are the large node's GPFS file systems.
func benchFilesystems() [4]string { return [...]string{"scratch", "home", "projects", "apps"} }

// benchDisks are the metadata and data disks of each of the large node's
// file systems, sized after the testbeds of ../shared/reference.md: scratch
// on 4 HDD arrays with their expansions (64 RAID 6 LUNs) and an SSD
// metadata module (4 RAID 1 LUNs), projects on the NVMe tier (8 NVMe-oF
// volumes, metadata on one array), home and apps small.
func benchDisks() [4][2]int { return [...][2]int{{4, 64}, {2, 6}, {1, 8}, {2, 2}} }

// genGPFSDiag writes what the diagnosis commands' fakes print for the large
// node: mmlsfs of the 4 file systems, their benchDisks for mmlsdisk, and
// mmlsqos with 3 pools of 3 classes over the 12 five-second slots of its
// default minute.
func genGPFSDiag(b testing.TB, dir string) {
	var fs strings.Builder
	fs.WriteString("mmlsfs::HEADER:version:reserved:reserved:deviceName:fieldName:data:remarks:\n")
	for i, name := range benchFilesystems() {
		fmt.Fprintf(&fs, "mmlsfs::0:1:::%s:defaultMountPoint:%%2Fgpfs%%2F%s::\n", name, name)

		var disks strings.Builder
		disks.WriteString("mmlsdisk::HEADER:version:reserved:reserved:nsdName:driverType:sectorSize:failureGroup:metadata:data:status:availability:diskID:storagePool:remarks:numQuorumDisks:readQuorumValue:writeQuorumValue:diskSizeKB:diskUID:thinDiskType:\n")
		nMeta, nData := benchDisks()[i][0], benchDisks()[i][1]
		for d := 1; d <= nMeta+nData; d++ {
			pool, meta, data := "data", "no", "yes"
			if d <= nMeta {
				pool, meta, data = "system", "yes", "no"
			}
			fmt.Fprintf(&disks, "mmlsdisk::0:1:::%s_nsd%02d:nsd:512:%d:%s:%s:ready:up:%d:%s:desc:3:2:2:117190950912:0A0A001E6650C1%02X::\n",
				name, d, d%2+1, meta, data, d, pool, d)
		}
		benchWrite(b, filepath.Join(dir, "mmlsdisk-"+name+".txt"), strings.TrimSuffix(disks.String(), "\n"))

		var qos strings.Builder
		qos.WriteString("mmlsqos:status:HEADER:version:reserved:reserved:enabled:throttling:monitoring:fineStatsSecs:idStats:\n" +
			"mmlsqos:stats:HEADER:version:reserved:reserved:pool:timeEpoch:class:iops:ioql:qsdl:et:MBs:\n" +
			"mmlsqos:status:0:1:::Yes:Yes:Yes:0:No:\n")
		for slot := 0; slot < 12; slot++ {
			for _, pool := range []string{"system", "data", "nvme"} {
				for _, class := range []string{"misc", "other", "maintenance"} {
					fmt.Fprintf(&qos, "mmlsqos:stats:0:1:::%s:%d:%s:%d,5:0,85:1,2e-05:5:%d.25:\n", pool, 1717164420+5*slot, class, 800+slot, 100+slot)
				}
			}
		}
		benchWrite(b, filepath.Join(dir, "mmlsqos-"+name+".txt"), strings.TrimSuffix(qos.String(), "\n"))
	}
	benchWrite(b, filepath.Join(dir, "mmlsfs.txt"), strings.TrimSuffix(fs.String(), "\n"))
}

// genMounts writes /proc/mounts of the large node: its system mounts, the
// 40 NFS mounts of genMountstats and the 4 GPFS file systems.
func genMounts(b testing.TB, procRoot string) {
	var s strings.Builder
	s.WriteString("sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\nproc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n" +
		"devtmpfs /dev devtmpfs rw,nosuid,size=4096k,nr_inodes=65536,mode=755 0 0\ntmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n" +
		"tmpfs /run tmpfs rw,nosuid,nodev,size=52428800k,nr_inodes=819200,mode=755 0 0\n/dev/sda2 / ext4 rw,relatime 0 0\n" +
		"cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n")
	for m := 0; m < 40; m++ {
		fmt.Fprintf(&s, "nfs%02d.example.org:/export/vol%02d /mnt/vol%02d nfs rw,relatime,vers=3,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,local_lock=none,addr=10.10.1.%d 0 0\n",
			m%4, m, m, m%4+5)
	}
	for _, name := range benchFilesystems() {
		fmt.Fprintf(&s, "%s /gpfs/%s gpfs rw,relatime 0 0\n", name, name)
	}
	benchWrite(b, filepath.Join(procRoot, "4242", "mounts"), strings.TrimSuffix(s.String(), "\n"))
	// As on Linux, /proc/mounts is self/mounts (the daemon reads it there).
	if err := os.Symlink("self/mounts", filepath.Join(procRoot, "mounts")); err != nil {
		b.Fatal(err)
	}
}

var benchTree = flag.String("bench.tree", "",
	"TestWriteBenchTree writes the scrape benchmark's node (sys/, proc/, gpfs/ with the fake commands) into this directory, for bench/scrape.sh")

// TestWriteBenchTree writes BenchmarkScrape's large node to -bench.tree, so
// that bench/scrape.sh can measure the real daemon's scrapes of it over
// HTTP. Without the flag it does nothing.
func TestWriteBenchTree(t *testing.T) {
	if *benchTree == "" {
		t.Skip("no -bench.tree")
	}
	root := *benchTree
	genInfiniBand(t, filepath.Join(root, "sys"))
	genNVMe(t, filepath.Join(root, "sys"))
	genMountstats(t, filepath.Join(root, "proc"))
	// A large site's Lustre client: 512 OSTs and an MDT, as
	// BenchmarkScrape/lustre reads them.
	genLustre(t, root, 512)
	gpfsDir := filepath.Join(root, "gpfs")
	genGPFS(t, gpfsDir)
	// The fakes answer from the fixture files next to them.
	genMounts(t, filepath.Join(root, "proc"))
	for _, f := range []string{"mmpmon", "mmgetstate", "mmhealth", "mmdiag", "mmfsadm", "mmlsfs", "mmlsdisk", "mmlsqos", "nsd_ds.txt"} {
		mode := os.FileMode(0o755)
		if strings.HasSuffix(f, ".txt") {
			mode = 0o644
		}
		copyGPFSFixture(t, gpfsDir, f, f, mode)
	}
}

func BenchmarkScrape(b *testing.B) {
	root := b.TempDir()
	sysRoot, procRoot, gpfsDir := filepath.Join(root, "sys"), filepath.Join(root, "proc"), filepath.Join(root, "gpfs")
	genInfiniBand(b, sysRoot)
	genNVMe(b, sysRoot)
	genMountstats(b, procRoot)
	genMounts(b, procRoot)
	genGPFS(b, gpfsDir)
	b.Setenv("FAKE_GPFS_FIXTURES", gpfsDir)
	logger := log.NewNopLogger()

	ib, err := newInfiniBandCollector(sysRoot, logger)
	if err != nil {
		b.Fatal(err)
	}
	// No device nodes: SMART reads fail at open(), as without CAP_SYS_ADMIN.
	nvme, err := newNVMeCollector(sysRoot, filepath.Join(root, "dev"), 2*time.Second, logger)
	if err != nil {
		b.Fatal(err)
	}
	nfs, err := newNFSCollector(procRoot, "", logger)
	if err != nil {
		b.Fatal(err)
	}
	gpfs, err := newGPFSCollector(gpfsConfig{
		mmpmonPath:     fixturePath(b, "gpfs", "mmpmon"),
		mmgetstatePath: fixturePath(b, "gpfs", "mmgetstate"),
		mmhealthPath:   fixturePath(b, "gpfs", "mmhealth"),
		timeout:        30 * time.Second,
		interval:       15 * time.Second,
		stateInterval:  time.Minute,
		// The diagnosis commands, with their default intervals; a scrape
		// also reads the node's mounts.
		mmdiagPath:      fixturePath(b, "gpfs", "mmdiag"),
		mmfsadmPath:     fixturePath(b, "gpfs", "mmfsadm"),
		mmlsfsPath:      fixturePath(b, "gpfs", "mmlsfs"),
		mmlsdiskPath:    fixturePath(b, "gpfs", "mmlsdisk"),
		mmlsqosPath:     fixturePath(b, "gpfs", "mmlsqos"),
		mountsPath:      filepath.Join(procRoot, "self", "mounts"),
		waitersInterval: time.Minute,
		disksInterval:   time.Minute,
		qosInterval:     time.Minute,
	}, logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gpfs.Close() })
	gpfsOut, err := os.ReadFile(filepath.Join(gpfsDir, "fs_io_s.txt"))
	if err != nil {
		b.Fatal(err)
	}
	healthOut, err := os.ReadFile(filepath.Join(gpfsDir, "mmhealth.txt"))
	if err != nil {
		b.Fatal(err)
	}

	gather := func(b *testing.B, cs map[string]Collector) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(NewRegistryFrom(logger, cs))
		b.ReportAllocs()
		series := 0
		for i := 0; i < b.N; i++ {
			mfs, err := reg.Gather()
			if err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				for _, mf := range mfs {
					series += len(mf.GetMetric())
				}
			}
		}
		b.ReportMetric(float64(series), "series")
	}
	b.Run("infiniband", func(b *testing.B) { gather(b, map[string]Collector{"infiniband": ib}) })
	b.Run("nvme", func(b *testing.B) { gather(b, map[string]Collector{"nvme": nvme}) })
	b.Run("nfs", func(b *testing.B) { gather(b, map[string]Collector{"nfs": nfs}) })
	diagOut := map[string][]byte{}
	for _, f := range []string{"mmdiag-waiters.txt", "mmlsfs.txt", "mmlsdisk-scratch.txt", "mmlsqos-scratch.txt"} {
		data, err := os.ReadFile(filepath.Join(gpfsDir, f))
		if err != nil {
			b.Fatal(err)
		}
		diagOut[f] = data
	}
	b.Run("gpfs-diag-parse", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, _, err := parseMmdiagWaiters(diagOut["mmdiag-waiters.txt"]); err != nil {
				b.Fatal(err)
			}
			if _, _, err := parseMmlsfs(diagOut["mmlsfs.txt"]); err != nil {
				b.Fatal(err)
			}
			if d, _, err := parseMmlsdisk(diagOut["mmlsdisk-scratch.txt"]); err != nil || len(d) != 68 {
				b.Fatalf("%d disks, %v", len(d), err)
			}
			if _, _, err := parseMmlsqos(diagOut["mmlsqos-scratch.txt"]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gpfs-parse", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			res, _, err := parseMmpmon(gpfsOut)
			if err != nil || len(res.fs) != 4 {
				b.Fatalf("%d file systems, %v", len(res.fs), err)
			}
			if _, _, err := parseY(healthOut); err != nil {
				b.Fatal(err)
			}
		}
	})
	// One round of the iohist collector, off the scrape path: a full
	// default history (512 I/Os) of a client of 64 NSD servers, every row
	// new (the history turned over since the last read, the most work a
	// round does), parsed, counted and turned into metrics.
	b.Run("gpfs-iohist-round", func(b *testing.B) {
		histories := [2][]byte{genIohist(0), genIohist(512)}
		var state gpfsIohistState
		d := newGPFSIohistDescs()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			entries, _, err := parseIohist(histories[i%2])
			if err != nil || len(entries) != 512 {
				b.Fatalf("%d rows, %v", len(entries), err)
			}
			if ms := state.round(entries, &d, ""); len(ms) != 9*64+4 {
				b.Fatalf("%d metrics, want %d", len(ms), 9*64+4)
			}
		}
	})
	// A scrape exports the GPFS commands' last answers; the commands run
	// in the background (gpfs-refresh is one round of them, off the
	// scrape path, every --collector.gpfs.interval).
	b.Run("gpfs", func(b *testing.B) { gather(b, map[string]Collector{"gpfs": gpfs}) })
	b.Run("gpfs-refresh", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			for _, cmd := range gpfs.commands {
				gpfs.refresh(cmd)
				cmd.mu.Lock()
				err := cmd.last.err
				cmd.mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	// A large site's Lustre client, 512 OSTs: a scrape exports the last
	// round; lustre-round is one round of reads, off the scrape path,
	// every --collector.lustre.interval.
	lustreRoot := filepath.Join(root, "lustre")
	genLustre(b, lustreRoot, 512)
	lustre := newTestLustre(b, lustreRoot, 30*time.Second)
	b.Run("lustre", func(b *testing.B) { gather(b, map[string]Collector{"lustre": lustre}) })
	b.Run("lustre-round", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if r := lustre.round(); len(r.metrics) < 512*10 {
				b.Fatalf("%d metrics in a round of 512 OSTs", len(r.metrics))
			}
		}
	})
	b.Run("all-but-gpfs", func(b *testing.B) {
		gather(b, map[string]Collector{"infiniband": ib, "nvme": nvme, "nfs": nfs})
	})
	b.Run("all", func(b *testing.B) {
		gather(b, map[string]Collector{"infiniband": ib, "nvme": nvme, "nfs": nfs, "gpfs": gpfs})
	})
}
