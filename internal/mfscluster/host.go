package mfscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
)

// Host is one machine of the cluster: a network namespace with one
// address, a hostname of its own and one daemon.
type Host struct {
	// Name is the host's hostname in its UTS namespace ("master",
	// "cs-a", "client-0") and the name of its veth on the switch.
	Name string
	// Addr is its IPv4 address, without prefix length.
	Addr string
	// NetNS is its network namespace's name (/run/netns/<NetNS>).
	NetNS string

	dir      string // its configs, data and logs
	switchNS string
	cpu      *cpuCgroup
	daemon   *daemon
}

func (h *Host) String() string { return h.Name + " (" + h.Addr + ")" }

// ChunkServer is a data server: mfschunkserver on a device of its own.
type ChunkServer struct {
	*Host
	// Label is its MooseFS label, one letter: storage classes name it.
	Label string
	// Disk is its loop-mounted file system; the chunks are in Disk.Mount.
	Disk probetest.Loop

	io *probetest.IOCgroup
	// diskRate is Options.DiskRate, what ThrottleDisk(0) comes back to.
	diskRate int64
}

// Client is a client host: an mfsmount of the whole file system.
type Client struct {
	*Host
	// Mount is where the file system is mounted, in the machine's mount
	// namespace: tests on the machine use it as any path.
	Mount string
}

// Command returns a command that runs name in the host's network and UTS
// namespaces (so it sees the host's address and hostname), in the
// machine's mount namespace. It can run only while the host's daemon is.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return h.CommandContext(context.Background(), name, args...)
}

// CommandContext is Command, killed when ctx is done.
func (h *Host) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	ns := []string{"--net=" + netnsPath(h.NetNS)}
	if h.daemon != nil {
		ns = append(ns, fmt.Sprintf("--uts=/proc/%d/ns/uts", h.daemon.cmd.Process.Pid))
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(ns, "--", name), args...)...)
	cmd.WaitDelay = time.Second
	return cmd
}

// runTimeout bounds Run: an admin tool on a mount whose master is frozen
// would otherwise wait as long as mfsmount retries.
const runTimeout = 60 * time.Second

// Run runs a command as Command does, for at most a minute, and returns
// its trimmed combined output; the error names the host and holds the
// output.
func (h *Host) Run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	out, err := h.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %s %s: %w: %s", h, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func netnsPath(ns string) string { return filepath.Join("/run/netns", ns) }

// ThrottleNetwork limits the host's link to bytesPerSec in each
// direction with a token bucket (tbf) on both ends of its veth: the
// host's end shapes what it sends, the switch's end what it receives.
// 0 lifts the limit. (This kernel has no netem; tbf is what there is.)
func (h *Host) ThrottleNetwork(bytesPerSec int64) error {
	for _, e := range h.linkEnds() {
		if bytesPerSec <= 0 {
			// Deleting a root qdisc that is not there is an error; a
			// host that was never throttled is not.
			out, err := runOut("tc", "-n", e.ns, "qdisc", "show", "dev", e.dev, "root")
			if err != nil {
				return fmt.Errorf("%s: network: %v: %s", h, err, out)
			}
			if !strings.Contains(out, "tbf") {
				continue
			}
			if out, err := runOut("tc", e.liftArgs()...); err != nil {
				return fmt.Errorf("%s: lifting the network throttle on %s: %v: %s", h, e.dev, err, out)
			}
			continue
		}
		if out, err := runOut("tc", e.throttleArgs(bytesPerSec)...); err != nil {
			return fmt.Errorf("%s: throttling the network on %s: %v: %s", h, e.dev, err, out)
		}
	}
	return nil
}

// linkEnd is one end of a host's veth: the interface dev in the network
// namespace ns.
type linkEnd struct{ ns, dev string }

// linkEnds are both ends of the host's veth: the host's own, which
// shapes what it sends, and the switch's, which shapes what it receives.
func (h *Host) linkEnds() []linkEnd {
	return []linkEnd{{h.NetNS, hostIf}, {h.switchNS, h.Name}}
}

// throttleArgs are tc's arguments that shape the end to bytesPerSec.
func (e linkEnd) throttleArgs(bytesPerSec int64) []string {
	// A burst of 64 KiB (one GSO segment of a veth) or a tenth of a
	// second of traffic, whichever is larger, keeps tbf accurate
	// without letting a large read through at full speed.
	burst := max(bytesPerSec/10, 64<<10)
	return []string{"-n", e.ns, "qdisc", "replace", "dev", e.dev, "root", "tbf",
		"rate", strconv.FormatInt(bytesPerSec*8, 10) + "bit",
		"burst", strconv.FormatInt(burst, 10), "latency", "200ms"}
}

// liftArgs are tc's arguments that remove the end's shaping.
func (e linkEnd) liftArgs() []string {
	return []string{"-n", e.ns, "qdisc", "del", "dev", e.dev, "root"}
}

// LinkBytes is what the host has sent and received on its own link since
// the cluster came up: the counters of its veth end, read with `ip -s`.
func (h *Host) LinkBytes() (sent, received int64, err error) {
	out, err := runOut("ip", "-n", h.NetNS, "-s", "-j", "link", "show", "dev", hostIf)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: link counters: %v: %s", h, err, out)
	}
	sent, received, err = parseLinkBytes([]byte(out))
	if err != nil {
		return 0, 0, fmt.Errorf("%s: link counters: %w", h, err)
	}
	return sent, received, nil
}

// parseLinkBytes reads the byte counters of the one link of
// `ip -s -j link show dev X`.
func parseLinkBytes(b []byte) (sent, received int64, err error) {
	var links []struct {
		Stats struct {
			RX struct{ Bytes *int64 } `json:"rx"`
			TX struct{ Bytes *int64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(b, &links); err != nil {
		return 0, 0, err
	}
	if len(links) != 1 || links[0].Stats.TX.Bytes == nil || links[0].Stats.RX.Bytes == nil {
		return 0, 0, fmt.Errorf("want one link with stats64 tx and rx bytes, got %s", b)
	}
	return *links[0].Stats.TX.Bytes, *links[0].Stats.RX.Bytes, nil
}

// Freeze stops the host's daemon (SIGSTOP to its process group): the
// host still answers ARP and its TCP connections stay open, but nothing
// it runs makes progress until Thaw.
func (h *Host) Freeze() error { return h.daemon.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen daemon (SIGCONT).
func (h *Host) Thaw() error { return h.daemon.signal(syscall.SIGCONT) }

// ThrottleCPU limits the host's daemon to fraction of one CPU (cgroup v1
// cpu.cfs_quota_us over a 20 ms period, so at least 0.05); 0 lifts the
// limit.
func (h *Host) ThrottleCPU(fraction float64) error {
	if err := h.cpu.limit(fraction); err != nil {
		return fmt.Errorf("%s: %w", h, err)
	}
	return nil
}

// Pid is the process id of the host's daemon.
func (h *Host) Pid() int { return h.daemon.cmd.Process.Pid }

// daemon is a host's server process, started in the foreground so that
// the test owns it, in a process group of its own.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  *probetest.LogBuffer
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// startDaemon starts argv on h: in h's network namespace, in a new UTS
// namespace named h.Name, in cgroups (their cgroup.procs files) from its
// first instruction, and in the machine's mount namespace. The shell
// moves itself into the cgroups and sets the hostname, then becomes the
// daemon (exec), so the daemon's pid is the one started here. Cleanup
// stops it.
func (h *Host) startDaemon(t testing.TB, procsFiles []string, argv ...string) {
	t.Helper()
	script := `hostname "$0" || exit 1
for f in $MFSC_CGROUP_PROCS; do echo $$ > "$f" || exit 1; done
exec "$@"`
	cmd := exec.Command("nsenter", append([]string{"--net=" + netnsPath(h.NetNS), "--", "sh", "-c", script, h.Name}, argv...)...)
	cmd.Env = append(os.Environ(), "MFSC_CGROUP_PROCS="+strings.Join(procsFiles, " "))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	d := &daemon{name: fmt.Sprintf("%s on %s", filepath.Base(argv[0]), h), cmd: cmd, log: &probetest.LogBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.log, d.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", d.name, err)
	}
	h.daemon = d
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", d.name, tail(d.log.String(), 40))
		}
	})
}

// signal sends sig to the daemon's process group.
func (d *daemon) signal(sig syscall.Signal) error {
	select {
	case <-d.done:
		return fmt.Errorf("%s: exited (%v), cannot send %v", d.name, d.err, sig)
	default:
	}
	if err := syscall.Kill(-d.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: sending %v: %w", d.name, sig, err)
	}
	return nil
}

// exited says whether the daemon has exited, and how.
func (d *daemon) exited() (bool, error) {
	select {
	case <-d.done:
		return true, d.err
	default:
		return false, nil
	}
}

// stop ends the daemon: SIGCONT (a frozen daemon cannot act on SIGTERM),
// SIGTERM so it saves its state and closes its connections, SIGKILL to
// the whole group if it is not gone in 20 s. Children it forked (the
// master's metadata writer) are killed with the group.
func (d *daemon) stop() error {
	pgid := d.cmd.Process.Pid
	if done, _ := d.exited(); !done {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-d.done
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return fmt.Errorf("%s: still running 20 s after SIGTERM, killed", d.name)
		}
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s: killing what is left of its process group: %w", d.name, err)
	}
	return nil
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// runOut runs a command and returns its trimmed combined output.
func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
