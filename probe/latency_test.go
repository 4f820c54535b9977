package probe

import "testing"

func TestAddRejectsForeignBuckets(t *testing.T) {
	var h LatencyHistogram
	if err := h.Add(&LatencyHistogram{Classic: []uint64{1, 2}}); err == nil {
		t.Fatal("histogram with other classic buckets merged")
	}
}
