package mfscluster

import (
	"fmt"
	"strings"
)

// ByHand is a fault put on one host by a person at a shell, as root on
// the machine: the commands that do what one of the fault methods does,
// and the commands that lift it. They are built from the same arguments
// as the method, so they do exactly what it does.
type ByHand struct {
	// Fault says what it does, e.g. "network at 2 MB/s each way".
	Fault string
	// Method is the method it stands for, with its argument.
	Method string
	// On puts the fault on, Off lifts it; one shell command a line.
	On, Off []string
}

// NetworkByHand is ThrottleNetwork(bytesPerSec) by hand: tbf on both
// ends of the host's veth. Off deletes the qdiscs, which tc refuses on an
// end that has none.
func (h *Host) NetworkByHand(bytesPerSec int64) ByHand {
	b := ByHand{
		Fault:  fmt.Sprintf("network at %s each way", rate(bytesPerSec)),
		Method: fmt.Sprintf("ThrottleNetwork(%d)", bytesPerSec),
	}
	for _, e := range h.linkEnds() {
		b.On = append(b.On, shellJoin(append([]string{"tc"}, e.throttleArgs(bytesPerSec)...)))
		b.Off = append(b.Off, shellJoin(append([]string{"tc"}, e.liftArgs()...)))
	}
	return b
}

// CPUByHand is ThrottleCPU(fraction) by hand: the weight and quota of
// the host's cpu cgroup, which holds its daemon and nothing else (its
// period is set when the cluster starts). A fraction ThrottleCPU refuses gives no
// commands, and Fault says why.
func (h *Host) CPUByHand(fraction float64) ByHand {
	b := ByHand{
		Fault:  fmt.Sprintf("daemon held to %g%% of one CPU", fraction*100),
		Method: fmt.Sprintf("ThrottleCPU(%g)", fraction),
	}
	quota, err := cfsQuota(fraction)
	if err != nil {
		b.Fault = err.Error()
		return b
	}
	lift, _ := cfsQuota(0)
	b.On = []string{echoTo(sharesFor(fraction), h.cpu.sharesFile()), echoTo(quota, h.cpu.quotaFile())}
	b.Off = []string{echoTo(sharesFor(0), h.cpu.sharesFile()), echoTo(lift, h.cpu.quotaFile())}
	return b
}

// FreezeByHand is Freeze and Thaw by hand: SIGSTOP and SIGCONT to the
// daemon's process group.
func (h *Host) FreezeByHand() ByHand {
	return ByHand{
		Fault:  "daemon frozen",
		Method: "Freeze()",
		On:     []string{fmt.Sprintf("kill -s STOP -- -%d", h.Pid())},
		Off:    []string{fmt.Sprintf("kill -s CONT -- -%d", h.Pid())},
	}
}

// DiskByHand is ThrottleDisk(bytesPerSec) by hand: the chunkserver's
// file system remounted sync, the blkio throttles of its cgroup, and
// DropCache (syncfs, then each file's cached pages dropped with
// POSIX_FADV_DONTNEED, which GNU dd does for a whole file with
// iflag=nocache count=0). Off remounts async and lifts the throttles back
// to the device's own rate (Options.DiskRate, or none).
func (cs *ChunkServer) DiskByHand(bytesPerSec int64) ByHand {
	b := ByHand{
		Fault:  fmt.Sprintf("disk at %s each way", rate(bytesPerSec)),
		Method: fmt.Sprintf("ThrottleDisk(%d)", bytesPerSec),
		On:     []string{shellJoin([]string{"mount", "-o", "remount,sync", cs.Disk.Mount})},
		Off:    []string{shellJoin([]string{"mount", "-o", "remount,async", cs.Disk.Mount})},
	}
	for _, w := range cs.io.ThrottleWrites(bytesPerSec) {
		b.On = append(b.On, echoTo(w.Line, w.File))
	}
	for _, w := range cs.io.ThrottleWrites(cs.diskRate) {
		b.Off = append(b.Off, echoTo(w.Line, w.File))
	}
	b.On = append(b.On,
		shellJoin([]string{"sync", "-f", cs.Disk.Mount}),
		shellJoin([]string{"find", cs.Disk.Mount, "-type", "f", "-exec", "dd", "if={}", "iflag=nocache", "count=0", "status=none", ";"}))
	return b
}

// CommandLine is the command line Command runs: name in the host's
// network and UTS namespaces, for a person to run the same by hand.
func (h *Host) CommandLine(name string, args ...string) string {
	return shellJoin(h.Command(name, args...).Args)
}

// rate says bytesPerSec in MB/s.
func rate(bytesPerSec int64) string {
	return fmt.Sprintf("%g MB/s", float64(bytesPerSec)/1e6)
}

func echoTo(line, file string) string {
	return "echo " + shellQuote(line) + " > " + shellQuote(file)
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote quotes s for a POSIX shell unless the shell reads it as
// one word as it is.
func shellQuote(s string) string {
	plain := s != ""
	for _, r := range s {
		if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=,+%@-", r) {
			plain = false
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
