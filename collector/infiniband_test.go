package collector

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/procfs/sysfs"
)

func TestInfiniBandCollector(t *testing.T) {
	c, err := newInfiniBandCollector(filepath.Join("fixtures", "sys"), log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("fixtures", "expected", "infiniband.prom")
	compareWithFile(t, newTestRegistry("infiniband", c, nil), file, metricNames(t, file)...)
}

func TestInfiniBandNoHCA(t *testing.T) {
	c, err := newInfiniBandCollector(t.TempDir(), log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collectAll(c); !IsNoDataError(err) {
		t.Errorf("Update error = %v, want ErrNoData without /sys/class/infiniband", err)
	}
}

// A counter that saturates between scrapes is flagged on the scrape where
// it reaches its maximum, so a flat rate is explained.
func TestInfiniBandSaturationAppears(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "class", "infiniband", "mlx5_9", "ports", "1")
	write := func(name, value string) {
		t.Helper()
		p := filepath.Join(port, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "class", "infiniband", "mlx5_9"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "class", "infiniband", "mlx5_9", "fw_ver"), []byte("1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("link_layer", "InfiniBand")
	write("state", "4: ACTIVE")
	write("phys_state", "5: LinkUp")
	write("rate", "100 Gb/sec (4X EDR)")
	write("counters/link_downed", "254")

	c, err := newInfiniBandCollector(root, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	saturated := func() float64 {
		t.Helper()
		ms, err := collectAll(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Desc() == c.saturatedDesc.desc {
				return metricValue(t, m)
			}
		}
		t.Fatal("no saturation series")
		return 0
	}
	if v := saturated(); v != 0 {
		t.Errorf("link_downed at 254 flagged saturated (%v)", v)
	}
	write("counters/link_downed", "255")
	if v := saturated(); v != 1 {
		t.Errorf("link_downed at 255 (8-bit maximum) not flagged (%v)", v)
	}
}

func TestIBCounterSaturated(t *testing.T) {
	data := ibCounter{unit: 4}
	if !data.saturated(4*0xFFFFFFFF, 32) {
		t.Error("32-bit data counter at its maximum (in bytes) not flagged")
	}
	if data.saturated(0xFFFFFFFF, 32) {
		t.Error("data counter below its maximum flagged")
	}
	if data.saturated(4*0xFFFFFFFF, 0) {
		t.Error("64-bit counter flagged")
	}
	one := ibCounter{unit: 1}
	if !one.saturated(15, 4) || one.saturated(14, 4) || !one.saturated(65535, 16) {
		t.Error("narrow counters misjudged")
	}
}

// The fixture tree must stay readable by procfs itself, which the daemon
// uses with --path.sysfs.
func TestInfiniBandFixtureParsesWithProcfs(t *testing.T) {
	fs, err := sysfs.NewFS(filepath.Join("fixtures", "sys"))
	if err != nil {
		t.Fatal(err)
	}
	class, err := fs.InfiniBandClass()
	if err != nil {
		t.Fatal(err)
	}
	if len(class) != 3 {
		t.Errorf("got %d HCAs, want 3", len(class))
	}
	if v := class["mlx4_0"].Ports[1].Counters.LegacyPortXmitData64; v == nil || *v != 4*60101929881 {
		t.Errorf("mlx4_0 port 1 extended xmit data = %v", v)
	}
}

// One HCA whose attributes cannot be read fails the collector but the
// other HCAs are still exported.
func TestInfiniBandBrokenHCA(t *testing.T) {
	root := t.TempDir()
	good := filepath.Join(root, "class", "infiniband", "mlx5_0")
	bad := filepath.Join(root, "class", "infiniband", "mlx5_1")
	for path, value := range map[string]string{
		filepath.Join(good, "fw_ver"):                   "16.35.2000",
		filepath.Join(good, "ports", "1", "link_layer"): "InfiniBand",
		filepath.Join(good, "ports", "1", "state"):      "4: ACTIVE",
		filepath.Join(good, "ports", "1", "phys_state"): "5: LinkUp",
		filepath.Join(good, "ports", "1", "rate"):       "100 Gb/sec (4X EDR)",
		filepath.Join(bad, "fw_ver"):                    "16.35.2000",
		filepath.Join(bad, "ports", "1", "link_layer"):  "InfiniBand",
		filepath.Join(bad, "ports", "1", "state"):       "garbage",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := newInfiniBandCollector(root, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	ms, err := collectAll(c)
	if err == nil || !strings.Contains(err.Error(), "mlx5_1") {
		t.Errorf("Update error = %v, want one naming mlx5_1", err)
	}
	rates := 0
	for _, m := range ms {
		if m.Desc() == c.rate.desc {
			rates++
		}
	}
	if rates != 1 {
		t.Errorf("got %d port rates, want the good HCA's one", rates)
	}
}
