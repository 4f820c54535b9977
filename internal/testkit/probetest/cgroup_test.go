package probetest

import (
	"reflect"
	"testing"
)

// ThrottleWrites says what ThrottleRead and ThrottleWrite write, on
// either hierarchy, so that a person who copies it sets the same limits.
func TestThrottleWrites(t *testing.T) {
	v1 := &IOCgroup{dir: "/sys/fs/cgroup/blkio/plateau-test-1", devNum: "7:3"}
	if got, want := v1.ThrottleWrites(2_000_000), []CgroupWrite{
		{"/sys/fs/cgroup/blkio/plateau-test-1/blkio.throttle.read_bps_device", "7:3 2000000"},
		{"/sys/fs/cgroup/blkio/plateau-test-1/blkio.throttle.write_bps_device", "7:3 2000000"},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("cgroup v1: ThrottleWrites(2e6) = %q, want %q", got, want)
	}
	v2 := &IOCgroup{v2: true, dir: "/sys/fs/cgroup/plateau-test-2", devNum: "7:3"}
	if got, want := v2.ThrottleWrites(0), []CgroupWrite{
		{"/sys/fs/cgroup/plateau-test-2/io.max", "7:3 rbps=max"},
		{"/sys/fs/cgroup/plateau-test-2/io.max", "7:3 wbps=max"},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("cgroup v2: ThrottleWrites(0) = %q, want %q", got, want)
	}
}
