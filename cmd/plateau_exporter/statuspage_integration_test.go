//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/statuspage"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/procgroup"
)

// The status page as the administrator at the node sees it: the real
// daemon, a probe that ran on a temp directory and a baseline, loaded in
// headless Chromium. The DOM must show the probe and the ratio of its
// last run, and the screenshot must be a page, not a blank.
//
// Set PLATEAU_TEST_ARTIFACTS to a directory to keep the screenshot and
// the DOM there.
func TestIntegrationStatusPageInChromium(t *testing.T) {
	probetest.RequireCommand(t, "chromium", "chromium")
	cfg, _ := writeConfig(t, "{name: seqpage, kind: sequential, workers: 1, file_size: 4MiB, block_size: 1MiB, splay: false}")
	// A hand-written baseline (no params) applies whatever the machine;
	// the test checks that the page shows the ratio, not its value.
	baselines := filepath.Join(filepath.Dir(cfg), "baselines.yml")
	if err := os.WriteFile(baselines, []byte("targets:\n  e2e:\n    seqpage:\n      kind: sequential\n      ops:\n        write: {bytes_per_second: 1e8}\n        read: {bytes_per_second: 2e8}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendLine(t, cfg, "baselines_file: "+baselines)
	// The NFS collector reads /proc/self/mountstats, which every Linux
	// has, so the page has a collector's state to show.
	d := startDaemon(t, "--config.file="+cfg, "--probe.hostname=n1", "--collector.disable-defaults", "--collector.nfs")

	status := func() statuspage.Status {
		t.Helper()
		code, body := d.get("/status.json")
		if code != http.StatusOK {
			t.Fatalf("/status.json: HTTP %d: %s", code, body)
		}
		var st statuspage.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("/status.json: %v\n%s", err, body)
		}
		return st
	}
	// successes is the count of successful runs once the last run
	// succeeded with a ratio for each op, else 0.
	successes := func() (int, statuspage.ProbeStatus) {
		st := status()
		if len(st.Targets) != 1 || len(st.Targets[0].Probes) != 1 {
			t.Fatalf("status.json: want one target with one probe: %+v", st.Targets)
		}
		p := st.Targets[0].Probes[0]
		if p.LastRun == nil || !p.LastRun.Success {
			return 0, p
		}
		for _, o := range p.Ops {
			if o.Ratio == nil {
				return 0, p
			}
		}
		return int(p.Runs["success"]), p
	}
	// A slot comes every 5s; on a loaded machine a run can take seconds
	// more, and one may fail (timeout) before others pass.
	var p statuspage.ProbeStatus
	probetest.PollUntil(t, "three successful runs with ratios in /status.json", 250*time.Millisecond, 3*time.Minute, func() bool {
		var n int
		n, p = successes()
		return n >= 3
	})
	// Now that the machine's rate is known, a baseline near it, as
	// characterize would write: the page then shows ratios about 1 rather
	// than whatever 1e8 is to this disk. A reload applies it.
	var b strings.Builder
	b.WriteString("targets:\n  e2e:\n    seqpage:\n      kind: sequential\n      ops:\n")
	for _, o := range p.Ops {
		fmt.Fprintf(&b, "        %s: {bytes_per_second: %g}\n", o.Op, 1.1**o.Value)
	}
	if err := os.WriteFile(baselines, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, err := httpPost(d.url + "/-/reload"); err != nil || code != http.StatusOK {
		t.Fatalf("POST /-/reload: HTTP %d, %v", code, err)
	}
	before := int(p.Runs["success"])
	probetest.PollUntil(t, "a successful run against the new baseline", 250*time.Millisecond, 3*time.Minute, func() bool {
		n, _ := successes()
		return n > before
	})
	// A scrape runs the collectors, whose state the page then shows.
	d.metrics()

	dir := t.TempDir()
	if a := os.Getenv("PLATEAU_TEST_ARTIFACTS"); a != "" {
		if err := os.MkdirAll(a, 0o755); err != nil {
			t.Fatal(err)
		}
		dir = a
	}
	dom := chromium(t, "--dump-dom", d.url+"/")
	if err := os.WriteFile(filepath.Join(dir, "statuspage.html"), []byte(dom), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "statuspage.png")
	chromium(t, "--screenshot="+shot, "--window-size=1280,900", d.url+"/")
	t.Logf("screenshot of the status page: %s", shot)

	// The status after the page: every run up to it is in the history.
	st := status()
	p = st.Targets[0].Probes[0]
	for _, want := range []string{"Probe seqpage", "Target e2e", `<svg class="runs"`, "nfs"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %q", want)
		}
	}
	for _, o := range p.Ops {
		// The ratio the page shows, two decimals, must be that of one of
		// the probe's runs: a run may have ended between the page and the
		// JSON, so it need not be the last one's.
		m := regexp.MustCompile(`data-op="` + o.Op + `">(?s:.*?)<td class="num ratio">([^<]*)</td>`).FindStringSubmatch(dom)
		if m == nil {
			t.Errorf("op %s: no ratio cell in the DOM", o.Op)
			continue
		}
		shown, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Errorf("op %s: ratio cell %q is not a number", o.Op, m[1])
			continue
		}
		var ratios []string
		found := false
		for _, v := range o.History {
			r := strconv.FormatFloat(v / *o.Baseline, 'f', 2, 64)
			ratios = append(ratios, r)
			found = found || r == m[1]
		}
		if !found {
			t.Errorf("op %s: the page shows ratio %v, not one of the runs' ratios %v", o.Op, shown, ratios)
		}
	}
	checkScreenshot(t, shot, 1280, 900)
}

// chromium runs headless Chromium with args and returns its stdout. It
// runs in its own process group, killed on timeout and at cleanup, so no
// renderer outlives the test.
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	// Chromium can take half a minute to start on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Its own profile: a root user's default one may be in use, or stale.
	profile := t.TempDir()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--no-proxy-server",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir=" + profile}, args...)
	cmd := procgroup.Command(t, ctx, "chromium", all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// checkScreenshot decodes a PNG and checks it shows a page: the size
// asked for, and neither one colour nor nearly so.
func checkScreenshot(t *testing.T, path string, width, height int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() != width || b.Dy() != height {
		t.Errorf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), width, height)
	}
	colours := map[[3]uint32]int{}
	var sum, sumSq float64
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 8, g >> 8, bl >> 8}]++
			lum := (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(bl)) / 65535
			sum += lum
			sumSq += lum * lum
		}
	}
	n := float64(b.Dx() * b.Dy())
	std := math.Sqrt(math.Max(0, sumSq/n-(sum/n)*(sum/n)))
	most := 0
	for _, c := range colours {
		most = max(most, c)
	}
	t.Logf("screenshot: %d colours, the commonest on %.0f%% of the pixels, luminance deviation %.3f", len(colours), 100*float64(most)/n, std)
	// A blank page is one colour; text, the header bar and the charts
	// make many, with the background short of all pixels.
	if len(colours) < 10 || float64(most) > 0.97*n || std < 0.03 {
		t.Errorf("screenshot %s looks blank: %s", path, fmt.Sprintf("%d colours, the commonest on %d of %.0f pixels, luminance deviation %.3f", len(colours), most, n, std))
	}
}
