//go:build integration

package mfscluster_test

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plateau-exporter/plateau_exporter/internal/mfscluster"
	"github.com/plateau-exporter/plateau_exporter/internal/slurmtest"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
	"github.com/plateau-exporter/plateau_exporter/probe/plateau"
	"go.yaml.in/yaml/v3"
)

// slurmSeqSize is the sequential probe's file in TestClusterCharacterizeSlurm.
const slurmSeqSize = 8 << 20

// TestClusterCharacterizeSlurm characterizes the MooseFS cluster as a site
// characterizes its file system (docs/fleet.md's "A whole file system: characterize
// through Slurm"): a slurmd on each of the four client hosts, each with its
// own address, hostname and link (shaped to clusterLink), and slurmctld
// and the salloc that runs `characterize --slurm` on the master's host, as
// on a head node. Every slurmd sees its own client's mount at one path
// (client-0's mount point, bound over in a mount namespace of its own),
// so the config's one target path reaches the file system through each
// node's own client, as one path does on a real cluster.
//
// It asserts what the characterization must show of a networked file
// system: every step spread over min(workers, 4) nodes; each client's
// own link carried its tasks' data; the aggregate never above what the
// links used can carry, and reads from four clients well above one
// client's (the links, not the servers, set the read plateau here); the
// aggregate plateau written as rules promtool accepts, its read above
// the node-class baseline of one client; node-class baselines from all
// four nodes; and nothing left in the file system.
func TestClusterCharacterizeSlurm(t *testing.T) {
	probetest.RequireCommand(t, "promtool", "prometheus")
	probetest.RequireCommand(t, "unshare", "util-linux")
	c := mfscluster.Start(t, mfscluster.Options{ChunkServers: 3, Clients: clusterClients, DiskSize: 1 << 30, DiskRate: clusterDiskRate})
	for _, cl := range c.Clients {
		if err := cl.ThrottleNetwork(clusterLink); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	exporter := alertstack.BuildExporter(t, dir)
	common := c.Clients[0].Mount
	root := makeProbeRoot(t, c.Clients[0])

	var nodes []slurmtest.Node
	for i, cl := range c.Clients {
		host := hostCommand(cl.Host)
		if i > 0 {
			// A private mount namespace in which this client's mount
			// covers client-0's mount point; it ends with slurmd and the
			// tasks it started.
			host = func(argv ...string) *exec.Cmd {
				return cl.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c",
					`mount --bind "$1" "$2" || exit 1; shift 2; exec "$@"`, "sh", cl.Mount, common}, argv...)...)
			}
		}
		nodes = append(nodes, slurmtest.Node{Name: cl.Name, Addr: cl.Addr, Hostname: cl.Name, Host: host})
	}
	sl := slurmtest.Start(t, slurmtest.Options{
		Nodes:          nodes,
		ControllerName: c.Master.Name,
		ControllerAddr: c.Master.Addr,
		Controller:     hostCommand(c.Master),
	})

	cfg := filepath.Join(dir, "plateau.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`defaults: {interval: 1m, timeout: 30s}
targets:
  - name: mfs
    path: %s
    probes:
      - {name: seq, kind: sequential, workers: 1, file_size: %s, block_size: 1MiB}
      - {name: md, kind: metadata, workers: 1, files: 64}
baselines_file: %s/node-baselines.yml
`, root, alertstack.FormatSize(slurmSeqSize), dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	sentBefore, receivedBefore := linkCounters(t, c)
	out := filepath.Join(dir, "out")
	const sample, runs, maxWorkers = 4, 2, 8
	cmd := sl.Command("salloc", "--nodes=4", "--exclusive", "--time=10", "--job-name=plateau-cluster",
		exporter, "--config.file="+cfg, "characterize", "--slurm", "--max-workers="+strconv.Itoa(maxWorkers),
		"--sample="+strconv.Itoa(sample), "--runs="+strconv.Itoa(runs), "--sweep-runs=1", "--run-spacing=0s",
		"--slurm.start-delay=3s", "--output-dir="+out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	err := slurmtest.RunWithin(cmd, 6*time.Minute)
	t.Logf("characterize --slurm over %d client hosts took %s", len(c.Clients), time.Since(started).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("salloc characterize --slurm: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), slurmtest.LastLines(stderr.String(), 40))
	}
	t.Logf("stdout:\n%s", stdout.String())
	sentAfter, receivedAfter := linkCounters(t, c)

	// The steps: each spread over min(workers, 4) nodes, each task
	// having moved its file.
	steps := readSteps(t, filepath.Join(out, "slurm_steps.csv"))
	aggregate := map[string]map[int]float64{} // seq op -> workers -> aggregate bytes/s
	for _, st := range steps {
		if st["probe"] != "seq" {
			continue
		}
		workers, nodesUsed := atoi(t, st["workers"]), atoi(t, st["nodes"])
		done, agg := atof(t, st["done"]), atof(t, st["aggregate"])
		if nodesUsed != min(workers, len(c.Clients)) || done != float64(workers*slurmSeqSize) || !(agg > 0) {
			t.Errorf("seq %s step at %d workers: %d nodes, %g bytes done, %g B/s; want %d nodes, %d bytes, a rate", st["op"], workers, nodesUsed, done, agg, min(workers, len(c.Clients)), workers*slurmSeqSize)
		}
		if aggregate[st["op"]] == nil {
			aggregate[st["op"]] = map[int]float64{}
		}
		aggregate[st["op"]][workers] = agg
	}
	for _, op := range []string{"write", "read"} {
		t.Logf("seq %s aggregate by workers (MB/s): %s", op, formatLevels(aggregate[op]))
		// What n clients move together is at most n links' worth (tbf
		// lets a tenth of a second through at once; a write's span ends
		// with its fsync, so its bytes have crossed the link).
		for w, agg := range aggregate[op] {
			if n := min(w, len(c.Clients)); agg > 1.25*float64(n)*clusterLink {
				t.Errorf("seq %s at %d workers on %d nodes: %.1f MB/s, more than %d links of %.0f MB/s carry", op, w, n, agg/1e6, n, clusterLink/1e6)
			}
		}
	}
	// Reads from four clients move well more than one client's: the
	// links, each client's own, set the read plateau. Writes are not held
	// to it: four clients writing at once on this two-core machine leave
	// stragglers (in the first run, 4 workers wrote at 24.7 MB/s
	// aggregate, 70.7 MB/s until the first finished), which is what
	// characterize reports.
	if one, four := aggregate["read"][1], aggregate["read"][4]; !(four > 1.5*one) {
		t.Errorf("seq read: 4 workers on 4 clients moved %.1f MB/s, not well above 1 worker on 1 client's %.1f MB/s: the clients do not reach the file system through links of their own", four/1e6, one/1e6)
	}
	// Each client's own link carried its tasks' data: at least the 4- and
	// 8-worker steps' files (one and two per node), each written out and
	// read back in.
	for i, cl := range c.Clients {
		sent, received := sentAfter[i]-sentBefore[i], receivedAfter[i]-receivedBefore[i]
		t.Logf("%s's link: sent %d MiB, received %d MiB during characterize --slurm", cl.Name, sent>>20, received>>20)
		if want := int64(3 * slurmSeqSize); sent < want || received < want {
			t.Errorf("%s's link sent %d MiB and received %d MiB, want at least %d MiB each way: its tasks did not go through its own client", cl.Name, sent>>20, received>>20, want>>20)
		}
	}

	// The aggregate plateau: rules promtool accepts, with write and read
	// of the target, above what one client holds alone.
	rules := filepath.Join(out, "filesystem_plateaus.yml")
	if b, err := exec.Command("promtool", "check", "rules", rules).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, b)
	}
	class, err := plateau.LoadBaselines(filepath.Join(out, "baselines.yml"))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := probe.LoadConfigFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"write", "read"} {
		fsPlateau := recordedPlateau(t, rules, "mfs", op)
		e, why := class.For("mfs", conf.Targets[0].Probes[0], op)
		if e == nil {
			t.Fatalf("no node-class baseline of seq %s: %s", op, why)
		}
		t.Logf("seq %s: file system's aggregate plateau %.1f MB/s, %.2fx one client's node-class baseline %.1f MB/s (links of %.0f MB/s)", op, fsPlateau/1e6, fsPlateau/e.Value, e.Value/1e6, clusterLink/1e6)
		if op == "read" && !(fsPlateau > 1.5*e.Value) {
			t.Errorf("seq read: the aggregate plateau %.1f MB/s is not well above one client's %.1f MB/s", fsPlateau/1e6, e.Value/1e6)
		}
	}
	// Node-class baselines of every op, from the runs of all four nodes.
	if !strings.Contains(stdout.String(), fmt.Sprintf("over %d sampled node(s)", sample)) {
		t.Errorf("no node-class report over %d sampled nodes", sample)
	}
	for _, p := range conf.Targets[0].Probes {
		for _, op := range probe.OpsOf(p.Kind) {
			e, why := class.For("mfs", p, op)
			if e == nil {
				t.Errorf("node-class baseline %s %s: %s", p.Name, op, why)
				continue
			}
			if e.Host != "" || !(e.Value > 0) || e.Runs != sample*runs {
				t.Errorf("node-class baseline %s %s: host %q value %g runs %d, want no host, a value, %d runs", p.Name, op, e.Host, e.Value, e.Runs, sample*runs)
			}
		}
	}

	// Nothing left: each host's probe directory holds its lock alone.
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if left := probetest.HostProbeDirEntries(t, root, d.Name()); len(left) > 0 {
			t.Errorf("left in %s's probe directory: %v", d.Name(), left)
		}
	}
	t.Logf("probe directories in the file system: %d", len(dirs))
}

// hostCommand runs a command on a cluster host (its network and UTS
// namespaces), as slurmtest starts a daemon there.
func hostCommand(h *mfscluster.Host) slurmtest.HostCommand {
	return func(argv ...string) *exec.Cmd { return h.Command(argv[0], argv[1:]...) }
}

// linkCounters reads every client's link counters, in c.Clients' order.
func linkCounters(t *testing.T, c *mfscluster.Cluster) (sent, received []int64) {
	t.Helper()
	for _, cl := range c.Clients {
		s, r, err := cl.LinkBytes()
		if err != nil {
			t.Fatal(err)
		}
		sent, received = append(sent, s), append(received, r)
	}
	return sent, received
}

// readSteps reads characterize --slurm's slurm_steps.csv, each row by
// its header's names.
func readSteps(t *testing.T, path string) []map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("%s: %d records, %v", path, len(recs), err)
	}
	var rows []map[string]string
	for _, r := range recs[1:] {
		row := map[string]string{}
		for i, name := range recs[0] {
			row[name] = r[i]
		}
		rows = append(rows, row)
	}
	return rows
}

// recordedPlateau is the value a filesystem_plateaus.yml records for a
// target's op as plateau:filesystem_plateau_bytes_per_second.
func recordedPlateau(t *testing.T, path, target, op string) float64 {
	t.Helper()
	// The file characterize --slurm writes: one group of recording rules,
	// each a number; an unknown key is an error, as for the shipped files.
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Record string            `yaml:"record"`
				Expr   string            `yaml:"expr"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Record == "plateau:filesystem_plateau_bytes_per_second" && r.Labels["target"] == target && r.Labels["op"] == op {
				v, err := strconv.ParseFloat(strings.TrimSpace(r.Expr), 64)
				if err != nil {
					t.Fatalf("%s: the %s %s plateau is not a number: %v", path, target, op, err)
				}
				return v
			}
		}
	}
	t.Fatalf("%s records no %s %s plateau", path, target, op)
	return 0
}

func formatLevels(m map[int]float64) string {
	var b []string
	for w := 1; w <= 1<<10; w *= 2 {
		if v, ok := m[w]; ok {
			b = append(b, fmt.Sprintf("%d: %.1f", w, v/1e6))
		}
	}
	return strings.Join(b, ", ")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
