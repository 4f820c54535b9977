package collector

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The gpfs collector's RDMA diagnosis runs "mmfsadm test verbs status", which
// prints one line saying whether the daemon's RDMA (InfiniBand verbs)
// transport started:
//
//	VERBS RDMA status: started
//
// or "disabled" (verbsRdma disabled, or not configured for this node) and
// other words when it failed to start (gpfs_exporter's
// collectors/verbs_test.go shows both). When RDMA is not started, GPFS
// sends its data over TCP, often an order of magnitude slower on an
// InfiniBand cluster, with nothing else looking wrong.

// parseVerbsStatus returns the status word of the VERBS RDMA line; the
// other non-blank lines are skipped and returned in bad.
func parseVerbsStatus(out []byte) (string, badLines, error) {
	var bad badLines
	status, found := "", false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), maxCommandOutput)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		rest, ok := strings.CutPrefix(line, "VERBS RDMA status:")
		if !ok || found {
			bad.add(lineNo, "not the VERBS RDMA status line", line)
			continue
		}
		status, found = strings.TrimSpace(rest), true
	}
	if err := sc.Err(); err != nil {
		return "", bad, err
	}
	if !found {
		return "", bad, errors.New("mmfsadm test verbs status: no 'VERBS RDMA status:' line")
	}
	if status == "" {
		return "", bad, errors.New("mmfsadm test verbs status: empty VERBS RDMA status")
	}
	return status, bad, nil
}

type gpfsVerbsDescs struct {
	started typedDesc
}

func newGPFSVerbsDescs() gpfsVerbsDescs {
	return gpfsVerbsDescs{
		// 1 if the GPFS daemon's RDMA (verbs) transport is started
		// ('mmfsadm test verbs status' says started), 0 otherwise: then
		// GPFS moves data over TCP.
		started: gpfsGauge("verbs_rdma_started",
			"1 if the GPFS daemon's RDMA (verbs) transport is started, else 0.",
			nil),
	}
}

func (c *gpfsCollector) verbs(ctx context.Context) ([]prometheus.Metric, error) {
	status, err := runGPFSParsed(ctx, c, gpfsCommandLine{path: c.cfg.mmfsadmPath,
		args: []string{"test", "verbs", "status"}, source: gpfsSourceVerbs}, parseVerbsStatus)
	if err != nil {
		return nil, err
	}
	v := 0.0
	if status == "started" {
		v = 1
	}
	return []prometheus.Metric{c.verbsDescs.started.mustNewConstMetric(v)}, nil
}
