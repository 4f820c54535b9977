package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLustreClientVersions reads a client tree of each release family
// (fixtures/lustre/<version>, see SOURCES there) with zero parse errors,
// and checks a few values against the raw text by hand: the wait unit of
// 2.15.7 and 2.16 ("usecs"), 2.16's quoted current_connection, the idle
// cycles in every state history (no reconnect), and, for 2.14, llite
// counters from a real capture.
func TestLustreClientVersions(t *testing.T) {
	for _, tc := range []struct {
		version string
		names   []string
		want    string
	}{
		{"2.10", nil, ""},
		{"2.12", nil, ""},
		{"2.14", []string{"plateau_lustre_metadata_operations_total", "plateau_lustre_target_reconnects_total"}, `
# HELP plateau_lustre_metadata_operations_total Metadata operations on this Lustre mount, by llite stats counter.
# TYPE plateau_lustre_metadata_operations_total counter
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="close"} 35955554
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="create"} 0
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="fsync"} 0
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="getattr"} 35955647
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="link"} 0
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="mkdir"} 17987059
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="mknod"} 17977752
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="open"} 35955554
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="readdir"} 60
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="rename"} 0
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="rmdir"} 17987079
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="setattr"} 0
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="statfs"} 17864
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="symlink"} 0
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="truncate"} 0
plateau_lustre_metadata_operations_total{filesystem="ai400x2",op="unlink"} 17977752
` + lustreReconnectsHelp + `
plateau_lustre_target_reconnects_total{filesystem="ai400x2",lustre_target="MDT0000"} 0
plateau_lustre_target_reconnects_total{filesystem="ai400x2",lustre_target="OST0000"} 0
plateau_lustre_target_reconnects_total{filesystem="ai400x2",lustre_target="OST0001"} 0
`},
		{"2.15.7", []string{"plateau_lustre_target_avg_wait_seconds", "plateau_lustre_target_reconnects_total"}, `
# HELP plateau_lustre_target_avg_wait_seconds Average reply wait of the RPCs to the OST or MDT (the import's avg_waittime), in seconds.
# TYPE plateau_lustre_target_avg_wait_seconds gauge
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="MDT0000"} 0.000512
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="OST0000"} 0.001284
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="OST0001"} 0.001284
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="OST0002"} 0.183
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="OST0003"} 0.001284
` + lustreReconnectsHelp + `
plateau_lustre_target_reconnects_total{filesystem="lfs",lustre_target="MDT0000"} 0
plateau_lustre_target_reconnects_total{filesystem="lfs",lustre_target="OST0000"} 0
plateau_lustre_target_reconnects_total{filesystem="lfs",lustre_target="OST0001"} 0
plateau_lustre_target_reconnects_total{filesystem="lfs",lustre_target="OST0002"} 0
plateau_lustre_target_reconnects_total{filesystem="lfs",lustre_target="OST0003"} 0
`},
		{"2.16", []string{"plateau_lustre_target_info", "plateau_lustre_target_avg_wait_seconds"}, `
# HELP plateau_lustre_target_avg_wait_seconds Average reply wait of the RPCs to the OST or MDT (the import's avg_waittime), in seconds.
# TYPE plateau_lustre_target_avg_wait_seconds gauge
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="MDT0000"} 0.000512
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="OST0000"} 0.001284
plateau_lustre_target_avg_wait_seconds{filesystem="lfs",lustre_target="OST0001"} 0.001284
# HELP plateau_lustre_target_info Server NID this client's import of the OST or MDT is connected to; always 1.
# TYPE plateau_lustre_target_info gauge
plateau_lustre_target_info{filesystem="lfs",lustre_target="MDT0000",nid="10.20.0.11@o2ib"} 1
plateau_lustre_target_info{filesystem="lfs",lustre_target="OST0000",nid="10.20.0.31@o2ib"} 1
plateau_lustre_target_info{filesystem="lfs",lustre_target="OST0001",nid="10.20.0.32@o2ib"} 1
`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			c := newTestLustre(t, fixturePath(t, "lustre", tc.version), 5*time.Second)
			reg := newTestRegistry("lustre", c, nil)
			if tc.want != "" {
				if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want), tc.names...); err != nil {
					t.Fatal(err)
				}
			} else if _, err := reg.Gather(); err != nil {
				t.Fatal(err)
			}
			last, _ := c.rounds.latest()
			for src, n := range last.badLines {
				if n != 0 {
					t.Errorf("%d parse errors in the %s files of valid %s output", n, src, tc.version)
				}
			}
		})
	}
}

const lustreReconnectsHelp = `# HELP plateau_lustre_target_reconnects_total Times the import was FULL again after losing its connection.
# TYPE plateau_lustre_target_reconnects_total counter`

// TestLustreServerVersions reads a server tree of each release family
// with zero parse errors: 2.14's stats and md_stats are a real capture;
// 2.15.7's job_stats quotes an id with ':' and escapes it as \x3A, 2.16's
// quotes it and leaves ':' as is and adds a hist to the byte counters. The
// same job must have the same job_id under both.
func TestLustreServerVersions(t *testing.T) {
	jobs := `
# HELP plateau_lustre_server_job_read_bytes_total Bytes read by the job from this OST or MDT (job_stats read_bytes sum).
# TYPE plateau_lustre_server_job_read_bytes_total counter
plateau_lustre_server_job_read_bytes_total{filesystem="lfs",job_id="SLURM_JOB10:0:node12",lustre_target="OST0000"} 4311744512
plateau_lustre_server_job_read_bytes_total{filesystem="lfs",job_id="_other",lustre_target="OST0000"} 8192
plateau_lustre_server_job_read_bytes_total{filesystem="lfs",job_id="dd.4854",lustre_target="OST0000"} 1048576
`
	for _, tc := range []struct {
		version string
		names   []string
		want    string
	}{
		{"2.10", nil, ""},
		{"2.14", []string{"plateau_lustre_server_operations_total"}, ""},
		{"2.15.7", []string{"plateau_lustre_server_job_read_bytes_total"}, jobs},
		{"2.16", []string{"plateau_lustre_server_job_read_bytes_total"}, jobs},
	} {
		t.Run(tc.version, func(t *testing.T) {
			c := newTestLustreServer(t, fixturePath(t, "lustre_server", tc.version), 5*time.Second, 2)
			reg := newTestRegistry("lustre_server", c, nil)
			if tc.want != "" {
				if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want), tc.names...); err != nil {
					t.Fatal(err)
				}
			}
			series := gatherSeries(t, reg)
			for _, s := range c.parseErrs.snapshot() {
				if s.count != 0 {
					t.Errorf("%d parse errors in the %s files of valid %s output", s.count, s.source, tc.version)
				}
			}
			if tc.version == "2.14" {
				// From the capture: OST0001's statfs line, "statfs 227855 samples".
				found := false
				for _, s := range series {
					if s.name == "plateau_lustre_server_operations_total" && s.labels["lustre_target"] == "OST0001" && s.labels["op"] == "statfs" {
						found = s.value == 227855
					}
				}
				if !found {
					t.Error("OST0001 statfs is not 227855, the capture's count")
				}
			}
		})
	}
}
