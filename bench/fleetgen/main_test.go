package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The files hold each series' samples in time order, every window's
// samples inside its window, end at -end, and name every node.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	const end, block = 1_800_000_000, 7200
	g := gen{end: end, step: 60, history: 6*3600 + 900, long: 6*3600 + 900, counter: 3900, short: 600, epoch: end - 30*86400}
	st, err := g.write(3, block, dir)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.om"))
	if int64(len(files)) != st.files || st.files < 4 {
		t.Fatalf("%d files, stats say %d", len(files), st.files)
	}
	last := map[string]int64{}
	hourly := map[string][]int64{}      // the hourly records' timestamps
	fiveMinutes := map[string][]int64{} // the 5-minute records'
	var samples int64
	latest := int64(0)
	for _, name := range files {
		w, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "fleet-"), ".om"), 10, 64)
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		var prev string
		for sc.Scan() {
			line := sc.Text()
			prev = line
			if line == "# EOF" {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			j := strings.LastIndexByte(line[:i], ' ')
			ts, err := strconv.ParseInt(line[i+1:], 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			if _, err := strconv.ParseFloat(line[j+1:i], 64); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if ts < w || ts >= w+block || ts > end {
				t.Fatalf("%q outside window %d", line, w)
			}
			s := line[:j]
			if ts <= last[s] {
				t.Fatalf("%q not after %d", line, last[s])
			}
			if strings.Contains(s, ":max1h{") || strings.Contains(s, ":max7d{") {
				hourly[s] = append(hourly[s], ts)
			}
			if strings.Contains(s, ":max5m{") {
				fiveMinutes[s] = append(fiveMinutes[s], ts)
			}
			last[s] = ts
			latest = max(latest, ts)
			samples++
		}
		f.Close()
		if prev != "# EOF" {
			t.Fatalf("%s does not end with # EOF", name)
		}
	}
	if samples != st.samples || int64(len(last)) != st.series {
		t.Fatalf("read %d samples of %d series, stats say %d of %d", samples, len(last), st.samples, st.series)
	}
	if latest != end {
		t.Fatalf("last sample at %d, want %d", latest, end)
	}
	// The hourly level of the day group has one sample an hour, as the
	// group writes it, over the whole long history.
	if len(hourly) != 3*(2+1+1+2) {
		t.Errorf("%d hourly series, want 3 nodes x (2 file systems mounted rw, RDMA, one port's physical state, its rate's hour and week)", len(hourly))
	}
	for s, ts := range hourly {
		if len(ts) < 6 || len(ts) > 7 {
			t.Errorf("%s: %d samples over the 6h15m history, want one an hour", s, len(ts))
		}
		for i := 1; i < len(ts); i++ {
			if ts[i]/3600 != ts[i-1]/3600+1 {
				t.Errorf("%s: samples at %d and %d, not in consecutive hours", s, ts[i-1], ts[i])
			}
		}
	}
	// The day group's 5-minute maxima, likewise every 5 minutes.
	if len(fiveMinutes) != 3*(2+1+1) {
		t.Errorf("%d 5-minute series, want 3 nodes x (2 file systems mounted rw, RDMA, one port)", len(fiveMinutes))
	}
	for s, ts := range fiveMinutes {
		if n := len(ts); n < 6*12 || n > 6*12+4 {
			t.Errorf("%s: %d samples over the 6h15m history, want one every 5 minutes", s, n)
		}
		for i := 1; i < len(ts); i++ {
			if ts[i]/300 != ts[i-1]/300+1 {
				t.Errorf("%s: samples at %d and %d, not in consecutive 5 minutes", s, ts[i-1], ts[i])
			}
		}
	}
	for _, want := range []string{`up{instance="node0003:9731",job="plateau"}`,
		`plateau_probe_ratio{instance="node0001:9731",job="plateau",kind="metadata",op="create",probe="md4k",target="scratch"}`} {
		if _, ok := last[want]; !ok {
			t.Errorf("no series %s", want)
		}
	}
}
