package mfscluster

import (
	"os"
	"os/exec"
	"reflect"
	"testing"
)

// The commands a person copies to put a fault on by hand, for a host
// made as Start makes one. They are built from the arguments the fault
// methods run, so this pins what a person reads.
func TestByHand(t *testing.T) {
	h := &Host{
		Name: "client-1", Addr: "10.231.0.102", NetNS: "mfsc-abc123-client-1", switchNS: "mfsc-abc123-switch",
		cpu:    &cpuCgroup{dir: "/sys/fs/cgroup/cpu/mfsc-abc123-client-1"},
		daemon: &daemon{cmd: &exec.Cmd{Process: &os.Process{Pid: 4242}}},
	}
	for _, tc := range []struct {
		got  ByHand
		want ByHand
	}{
		{h.NetworkByHand(2_000_000), ByHand{
			Fault: "network at 2 MB/s each way", Method: "ThrottleNetwork(2000000)",
			On: []string{
				"tc -n mfsc-abc123-client-1 qdisc replace dev eth0 root tbf rate 16000000bit burst 200000 latency 200ms",
				"tc -n mfsc-abc123-switch qdisc replace dev client-1 root tbf rate 16000000bit burst 200000 latency 200ms",
			},
			Off: []string{
				"tc -n mfsc-abc123-client-1 qdisc del dev eth0 root",
				"tc -n mfsc-abc123-switch qdisc del dev client-1 root",
			},
		}},
		{h.CPUByHand(0.1), ByHand{
			Fault: "daemon held to 10% of one CPU", Method: "ThrottleCPU(0.1)",
			On:  []string{"echo 262144 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.shares", "echo 2000 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.cfs_quota_us"},
			Off: []string{"echo 1024 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.shares", "echo -1 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.cfs_quota_us"},
		}},
		{h.CPUByHand(0.25), ByHand{
			Fault: "daemon held to 25% of one CPU", Method: "ThrottleCPU(0.25)",
			On:  []string{"echo 262144 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.shares", "echo 5000 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.cfs_quota_us"},
			Off: []string{"echo 1024 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.shares", "echo -1 > /sys/fs/cgroup/cpu/mfsc-abc123-client-1/cpu.cfs_quota_us"},
		}},
		// Under the kernel's least quota: no commands, and why.
		{h.CPUByHand(0.02), ByHand{
			Fault:  "cpu: 0.02 of a CPU is under the least quota the kernel takes, 1000 µs in every 20000 (0.05)",
			Method: "ThrottleCPU(0.02)",
		}},
		{h.FreezeByHand(), ByHand{
			Fault: "daemon frozen", Method: "Freeze()",
			On: []string{"kill -s STOP -- -4242"}, Off: []string{"kill -s CONT -- -4242"},
		}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("got\n%q\nwant\n%q", tc.got, tc.want)
		}
	}
	if got, want := h.CommandLine("mfscli", "-H", "10.231.0.1", "-SIN"),
		"nsenter --net=/run/netns/mfsc-abc123-client-1 --uts=/proc/4242/ns/uts -- mfscli -H 10.231.0.1 -SIN"; got != want {
		t.Errorf("CommandLine = %q, want %q", got, want)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/dev/shm/plateau-test-1/cs-a/disk/mnt": "/dev/shm/plateau-test-1/cs-a/disk/mnt",
		"7:3 2000000":                           "'7:3 2000000'",
		"if={}":                                 "'if={}'",
		";":                                     "';'",
		"it's":                                  `'it'\''s'`,
		"":                                      "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
