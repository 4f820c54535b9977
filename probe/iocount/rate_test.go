package iocount

import (
	"testing"
	"time"
)

func TestConcurrent(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	at := func(s float64, r, w uint64) Sample {
		return Sample{Read: r, Write: w, Source: SourceDiskstats, Key: "sda2", At: t0.Add(time.Duration(s * float64(time.Second)))}
	}
	got, ok := Concurrent(at(0, 1000, 5000), at(2, 1000+4000, 5000+600), 2000, 1000)
	if !ok || got.Read != 1000 || got.Write != 0 || got.Source != SourceDiskstats {
		t.Errorf("Concurrent = %+v, %v; want read (4000-2000)/2 = 1000, write clamped at 0", got, ok)
	}
	for name, pair := range map[string][2]Sample{
		"same time":      {at(1, 0, 0), at(1, 10, 10)},
		"counters back":  {at(0, 10, 10), at(1, 5, 10)},
		"other device":   {at(0, 0, 0), {Source: SourceDiskstats, Key: "sdb", At: t0.Add(time.Second)}},
		"other source":   {at(0, 0, 0), {Source: SourceMmpmon, Key: "sda2", At: t0.Add(time.Second)}},
		"time went back": {at(2, 0, 0), at(1, 10, 10)},
	} {
		if _, ok := Concurrent(pair[0], pair[1], 0, 0); ok {
			t.Errorf("%s: Concurrent ok", name)
		}
	}
}
