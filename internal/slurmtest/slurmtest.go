// Package slurmtest runs a Slurm of a test's own: munged with its own key
// and socket, one slurmctld and a slurmd per node, all started from a
// temporary directory and stopped (their process groups killed) when the
// test ends, failed or not. The nodes share this host's loopback, each
// slurmd on a port of its own (`slurmd -N`), or live on hosts of their own
// (network and UTS namespaces, such as internal/mfscluster's clients),
// each started through the command that enters its host.
//
// It needs root and the Debian packages munge, slurmctld, slurmd and
// slurm-client (Debian's slurm-wlm 22.05.8 runs several slurmd on one
// host). No cgroup plugins: PID 1 is not systemd here, and a test must not
// touch the machine's cgroups (proctrack/linuxproc, task/none).
package slurmtest

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/procgroup"
)

// HostCommand makes the command that runs argv on a host: nil runs it on
// this one, as it is.
type HostCommand func(argv ...string) *exec.Cmd

func (h HostCommand) command(argv ...string) *exec.Cmd {
	if h == nil {
		return exec.Command(argv[0], argv[1:]...)
	}
	return h(argv...)
}

// Node is one slurmd.
type Node struct {
	Name string
	// Addr is where slurmctld and srun reach the node's slurmd
	// (NodeAddr), and Hostname its host's name (NodeHostname); "" for
	// this host's loopback and "localhost".
	Addr, Hostname string
	// Host starts slurmd on the node's host.
	Host HostCommand
}

// Options says what Start runs.
type Options struct {
	// Nodes are the cluster's nodes, one partition of them all ("test",
	// the default).
	Nodes []Node
	// ControllerName and ControllerAddr name slurmctld's host for the
	// slurmds (SlurmctldHost); "" for "localhost" on this host's loopback.
	ControllerName, ControllerAddr string
	// Controller starts slurmctld on its host, and Cluster.Command the
	// client commands there (srun's steps call back to where it runs).
	Controller HostCommand
}

// Cluster is a running Slurm.
type Cluster struct {
	// Conf is its slurm.conf; Dir holds it, the daemons' logs and each
	// node's spool directory (spool-<node>).
	Conf, Dir string
	// Nodes are the node names, in Options' order.
	Nodes      []string
	controller HostCommand
}

// Start starts munged, slurmctld and a slurmd per node, and waits until
// every node is idle.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	probetest.RequireRoot(t)
	for cmd, pkg := range map[string]string{"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "salloc": "slurm-client", "srun": "slurm-client", "scontrol": "slurm-client", "sinfo": "slurm-client"} {
		probetest.RequireCommand(t, cmd, pkg)
	}
	if len(o.Nodes) == 0 {
		t.Fatal("slurmtest: no nodes")
	}
	// Not t.TempDir, which is under a 0700 directory: munged wants every
	// directory above its socket searchable by all.
	dir, err := os.MkdirTemp("", "plateau-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o400); err != nil {
		t.Fatal(err)
	}
	// munged runs here: its socket is a path, which every host of the
	// machine's mount namespace reaches whatever its network.
	sock := filepath.Join(dir, "munge.sock")
	startGroup(t, filepath.Join(dir, "munged.out"), exec.Command("munged", "--foreground", "--socket="+sock, "--key-file="+keyFile,
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--log-file="+filepath.Join(dir, "munged.log"), "--seed-file="+filepath.Join(dir, "munge.seed")))
	probetest.WaitUntil(t, "munged's socket", 20*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })

	c := &Cluster{Conf: filepath.Join(dir, "slurm.conf"), Dir: dir, controller: o.Controller}
	var nodesConf strings.Builder
	for _, n := range o.Nodes {
		if err := os.Mkdir(filepath.Join(dir, "spool-"+n.Name), 0o755); err != nil {
			t.Fatal(err)
		}
		addr, host := or(n.Addr, "127.0.0.1"), or(n.Hostname, "localhost")
		fmt.Fprintf(&nodesConf, "NodeName=%s NodeHostname=%s NodeAddr=%s Port=%d CPUs=2\n", n.Name, host, addr, freePort(t))
		c.Nodes = append(c.Nodes, n.Name)
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctl := "localhost"
	if o.ControllerName != "" {
		ctl = fmt.Sprintf("%s(%s)", o.ControllerName, or(o.ControllerAddr, "127.0.0.1"))
	}
	// SlurmUser=root: the tests run as root, and root needs no slurm
	// user's access to the temporary directory. config_overrides lets
	// each node claim 2 CPUs whatever the machine has.
	conf := fmt.Sprintf(`ClusterName=plateau-test
SlurmctldHost=%s
SlurmctldPort=%d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%s
StateSaveLocation=%[4]s/state
SlurmdSpoolDir=%[4]s/spool-%%n
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd-%%n.pid
SlurmctldLogFile=%[4]s/slurmctld.log
SlurmdLogFile=%[4]s/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
%sPartitionName=test Nodes=%s Default=YES MaxTime=INFINITE State=UP
`, ctl, freePort(t), sock, dir, nodesConf.String(), strings.Join(c.Nodes, ","))
	if err := os.WriteFile(c.Conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	startGroup(t, filepath.Join(dir, "slurmctld.out"), o.Controller.command("slurmctld", "-D", "-i", "-f", c.Conf))
	for _, n := range o.Nodes {
		startGroup(t, filepath.Join(dir, "slurmd-"+n.Name+".out"), n.Host.command("slurmd", "-D", "-N", n.Name, "-f", c.Conf))
	}
	probetest.PollUntil(t, "every node idle in sinfo", 250*time.Millisecond, 60*time.Second, func() bool {
		out, err := c.Command("sinfo", "-h", "-N", "-o", "%N %T").Output()
		return err == nil && strings.Count(string(out), "idle") == len(c.Nodes)
	})
	return c
}

// Command returns a client command (salloc, srun, squeue, ...) that runs
// on the controller's host against this cluster.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	cmd := c.controller.command(append([]string{name}, args...)...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	return cmd
}

// Spool is a node's spool directory, where its slurmd keeps its steps'
// sockets.
func (c *Cluster) Spool(node string) string { return filepath.Join(c.Dir, "spool-"+node) }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	_, p, err := net.SplitHostPort(probetest.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// startGroup starts a daemon in the foreground in its own process group,
// its output to log, and stops the group at cleanup (SIGTERM, SIGKILL
// after 10s); a failed test gets the log's last lines.
func startGroup(t testing.TB, log string, cmd *exec.Cmd) {
	t.Helper()
	procgroup.Start(t, cmd, procgroup.Options{Name: strings.Join(cmd.Args, " "), Log: log, TailLines: 30, Grace: 10 * time.Second})
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string { return procgroup.LastLines(s, n) }

// RunWithin runs cmd (a salloc, say) and interrupts it, then kills it,
// past d.
func RunWithin(cmd *exec.Cmd, d time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-done:
			return fmt.Errorf("interrupted after %s: %v", d, err)
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("killed after %s: %v", d, <-done)
		}
	}
}
