package collector

import (
	"testing"
	"time"
)

func TestGPFSFSBytes(t *testing.T) {
	c := newTestGPFS(t, fakeGPFS(t, "mmpmon", 30*time.Second))
	// The first background run has to end before there is anything to read.
	if _, err := collectAll(c); err != nil {
		t.Fatal(err)
	}
	r, w, at, ok := c.FSBytes("scratch")
	if !ok || r != 205607400434 || w != 74839282351 || at.IsZero() {
		t.Errorf("FSBytes(scratch) = %d, %d, %v, %v; want the fixture's _br_ 205607400434 and _bw_ 74839282351", r, w, at, ok)
	}
	if _, _, _, ok := c.FSBytes("nosuchfs"); ok {
		t.Error("FSBytes of a file system mmpmon did not answer for is ok")
	}
	reg := NewRegistryFrom(nil, map[string]Collector{"gpfs": c})
	if r2, _, _, ok := reg.GPFSFSBytes("home"); !ok || r2 != 6291456 {
		t.Errorf("Registry.GPFSFSBytes(home) = %d, %v; want 6291456", r2, ok)
	}
	if _, _, _, ok := NewRegistryFrom(nil, map[string]Collector{}).GPFSFSBytes("scratch"); ok {
		t.Error("GPFSFSBytes without a gpfs collector is ok")
	}
}
