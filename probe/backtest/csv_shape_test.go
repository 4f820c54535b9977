package backtest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
)

// twoShapes is 24 consecutive runs of one series of the shared NERSC
// year (../shared/data/tokio-nersc-2017.csv, the TOKIO dataset's Edison
// summaries): its IOR read runs two jobs back to back every day, 512 GiB
// and 2 TiB with the same 2,048 ranks, at about 25 and 40 GiB/s.
const twoShapes = `system,file_system,app,op,start_unix,end_unix,mib_per_second,nprocs,job_bytes,fs_bytes_same_direction
edison,scratch3,ior,read,1495852462,1495852524,37185.528,2048,2199023255550,2173899837440
edison,scratch3,ior,read,1495942548,1495942583,28649.159,2048,549755813888,549728980992
edison,scratch3,ior,read,1495942589,1495942652,36478.056,2048,2199023255550,2200058494980
edison,scratch3,ior,read,1496029490,1496029537,20923.543,2048,549755813888,782963363840
edison,scratch3,ior,read,1496029544,1496029609,35246.877,2048,2199023255550,2206944247810
edison,scratch3,ior,read,1496197371,1496197407,28634.634,2048,549755813888,543333437857
edison,scratch3,ior,read,1496197413,1496197464,46028.198,2048,2199023255550,2193194577920
edison,scratch3,ior,read,1496289025,1496289105,20576.257,2048,549755813888,550049004943
edison,scratch3,ior,read,1496289110,1496289160,46899.415,2048,2199023255550,2198873859450
edison,scratch3,ior,read,1496373415,1496373456,23578.304,2048,549755813888,550197477376
edison,scratch3,ior,read,1496373461,1496373510,48219.568,2048,2199023255550,2169056886780
edison,scratch3,ior,read,1496458960,1496459304,1638.132,2048,549755813888,1301528843460
edison,scratch3,ior,read,1496459309,1496459382,40955.411,2048,2199023255550,2725869780990
edison,scratch3,ior,read,1496545541,1496545592,18896.732,2048,549755813888,550531355794
edison,scratch3,ior,read,1496545599,1496545670,32089.834,2048,2199023255550,2203821072380
edison,scratch3,ior,read,1496628581,1496628631,21454.899,2048,549755813888,564665335808
edison,scratch3,ior,read,1496628637,1496628720,27107.019,2048,2199023255550,2190914326530
edison,scratch3,ior,read,1496715359,1496715398,26144.436,2048,549755813888,586352730112
edison,scratch3,ior,read,1496715404,1496715485,27902.078,2048,2199023255550,2230092357630
edison,scratch3,ior,read,1496802107,1496802142,24744.176,2048,549755813888,556297932800
edison,scratch3,ior,read,1496802149,1496802194,52399.869,2048,2199023255550,2246545694720
edison,scratch3,ior,read,1496887289,1496887327,29097.542,2048,549755813888,551215771648
edison,scratch3,ior,read,1496887333,1496887378,53060.179,2048,2199023255550,2184484712450
edison,scratch3,ior,read,1496977684,1496977717,31559.134,2048,549755813888,549831229202
`

// A series whose runs recur in two shapes is two probes: each read
// alone, with its shape in its key and labels, and its own runs only.
func TestReadCSVSplitsASeriesByItsRecurringShapes(t *testing.T) {
	cols := CSVColumns{Series: []string{"system", "file_system", "app", "op"}, Time: "start_unix", Value: "mib_per_second", Shape: []string{"nprocs", "job_bytes", "no_such_column"}}
	s, err := ReadCSV(strings.NewReader(twoShapes), "nersc.csv", cols)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"edison/scratch3/ior/read/2048/2199023255550", "edison/scratch3/ior/read/2048/549755813888"}
	if len(s) != 2 || s[0].Key != want[0] || s[1].Key != want[1] {
		t.Fatalf("series %v, want %v", keys(s), want)
	}
	for i, x := range s {
		if len(x.Values) != 12 || x.Labels["job_bytes"] != strings.Split(want[i], "/")[5] || x.Labels["nprocs"] != "2048" || x.Labels["app"] != "ior" {
			t.Errorf("%s: %d runs, labels %v; want 12 runs of its shape, labeled with it", x.Key, len(x.Values), x.Labels)
		}
	}
	// Each shape's runs are steady where the mixture is not: the 2 TiB
	// runs are faster than the 512 GiB ones on most days.
	if plateau.Spread(s[0].Values) >= plateau.Spread(append(append([]float64{}, s[0].Values...), s[1].Values...)) {
		t.Errorf("the 2 TiB runs alone spread %.2f, no less than the mixture", plateau.Spread(s[0].Values))
	}
	// Without shape columns, the one series of the file.
	cols.Shape = nil
	if s, err := ReadCSV(strings.NewReader(twoShapes), "nersc.csv", cols); err != nil || len(s) != 1 || len(s[0].Values) != 24 {
		t.Fatalf("without shapes: %v, %v; want one series of 24 runs", keys(s), err)
	}
}

// A column that changes at most runs (here the file system's own bytes)
// is a measurement, not a shape: the series stays whole, and so does one
// whose runs hold one shape.
func TestReadCSVLeavesSeriesWholeWithoutRecurringShapes(t *testing.T) {
	cols := CSVColumns{Series: []string{"system", "file_system", "app", "op", "job_bytes"}, Time: "start_unix", Value: "mib_per_second", Shape: []string{"fs_bytes_same_direction", "nprocs"}}
	s, err := ReadCSV(strings.NewReader(twoShapes), "nersc.csv", cols)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || len(s[0].Values) != 12 || len(s[1].Values) != 12 {
		t.Fatalf("series %v, want the two of job_bytes, 12 runs each, unsplit", keys(s))
	}
	// A rare shape beside a recurring one: 21 runs of one and 2 of
	// another (as the shared file's failed runs of a few MB) split; the
	// 2 stand apart, too few to replay.
	var b strings.Builder
	b.WriteString("system,op,start_unix,mib_per_second,job_bytes\n")
	for i := range 23 {
		shape := "100"
		if i%8 == 7 {
			shape = "1"
		}
		fmt.Fprintf(&b, "s,read,%d,%g,%s\n", 1000+i, 10+math.Mod(float64(i), 3), shape)
	}
	s, err = ReadCSV(strings.NewReader(b.String()), "rare.csv", CSVColumns{Series: []string{"system", "op"}, Time: "start_unix", Value: "mib_per_second", Shape: []string{"job_bytes"}})
	if err != nil || len(s) != 2 || s[0].Key != "s/read/1" || len(s[0].Values) != 2 || len(s[1].Values) != 21 {
		t.Fatalf("a rare shape: %v, %v; want s/read/1 (2 runs) beside s/read/100 (21)", keys(s), err)
	}
}

func keys(s []Series) []string {
	var out []string
	for _, x := range s {
		out = append(out, x.Key)
	}
	return out
}
