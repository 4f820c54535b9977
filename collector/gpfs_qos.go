package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The gpfs collector's QoS diagnosis runs "mmlsqos DEVICE -Y" for each file
// system: how many IOPS and MB/s each QoS class used in each storage pool,
// and whether QoS throttles. A maintenance class (a restripe, a backup)
// throttled or eating a pool's I/O explains a drop that is not the storage's
// fault. The tables, as gpfs_exporter's collectors/mmlsqos_test.go shows them
// from a real system (numbers in the node's locale, "33,267" on a de_DE
// node):
//
//	mmlsqos:status:HEADER:version:reserved:reserved:enabled:throttling:monitoring:fineStatsSecs:idStats:
//	mmlsqos:stats:HEADER:version:reserved:reserved:pool:timeEpoch:class:iops:ioql:qsdl:et:MBs:
//
// mmlsqos reports the last 60 seconds (--seconds) in slots of et seconds,
// one stats row per pool, class and slot; the newest slot of each pool and
// class is exported. MBs is read as MiB per second: GPFS's sizes are
// binary, and gpfs_exporter reads the column the same way.

// gpfsQoSStat is the newest stats row of one pool and class.
type gpfsQoSStat struct {
	pool, class string
	epoch       float64
	iops, mbs   float64
}

// gpfsQoS is what one mmlsqos run showed for a file system.
type gpfsQoS struct {
	// hasStatus tells that the status row was read; without it nothing
	// of the output is trusted.
	hasStatus bool
	// throttling is true when QoS is enabled and throttles.
	throttling bool
	stats      []gpfsQoSStat
}

// parseMmlsqos parses "mmlsqos DEVICE -Y". A stats row it cannot read (no
// pool or class, numbers that are not numbers) is skipped and returned in
// bad; without a status row nothing is trusted.
func parseMmlsqos(out []byte) (gpfsQoS, badLines, error) {
	var q gpfsQoS
	y, bad, err := parseY(out)
	if err != nil {
		return q, bad, fmt.Errorf("mmlsqos -Y: %w", err)
	}
	status := y.table("mmlsqos", "status")
	if status == nil || len(status.rows) == 0 {
		return q, bad, errors.New("mmlsqos -Y: no status row")
	}
	enabledCol, throttlingCol := status.column("enabled"), status.column("throttling")
	if enabledCol < 0 {
		return q, bad, errors.New("mmlsqos -Y: no enabled column in the status HEADER")
	}
	yes := func(s string) bool { return strings.EqualFold(s, "yes") }
	row := status.rows[0]
	q.throttling = yes(status.value(row, enabledCol)) && (throttlingCol < 0 || yes(status.value(row, throttlingCol)))
	q.hasStatus = true

	t := y.table("mmlsqos", "stats")
	if t == nil {
		// QoS disabled, or no I/O in the window: nothing to report.
		return q, bad, nil
	}
	poolCol, classCol, epochCol := t.column("pool"), t.column("class"), t.column("timeEpoch")
	iopsCol, mbsCol := t.column("iops"), t.column("MBs")
	if poolCol < 0 || classCol < 0 || iopsCol < 0 || mbsCol < 0 {
		return q, bad, errors.New("mmlsqos -Y: stats HEADER lacks pool, class, iops or MBs")
	}
	index := map[[2]string]int{}
	for i, row := range t.rows {
		s := gpfsQoSStat{pool: t.value(row, poolCol), class: t.value(row, classCol)}
		if s.pool == "" || s.class == "" {
			t.badRow(&bad, i, "stats row lacks its pool or class")
			continue
		}
		var err1, err2, err3 error
		if epochCol >= 0 {
			s.epoch, err1 = parseLocaleFloat(t.value(row, epochCol))
		}
		s.iops, err2 = parseLocaleFloat(t.value(row, iopsCol))
		s.mbs, err3 = parseLocaleFloat(t.value(row, mbsCol))
		if err := errors.Join(err1, err2, err3); err != nil || s.iops < 0 || s.mbs < 0 {
			t.badRow(&bad, i, "stats row: timeEpoch, iops or MBs is not a usable number")
			continue
		}
		key := [2]string{s.pool, s.class}
		if j, ok := index[key]; ok {
			if s.epoch > q.stats[j].epoch {
				q.stats[j] = s
			}
			continue
		}
		index[key] = len(q.stats)
		q.stats = append(q.stats, s)
	}
	return q, bad, nil
}

type gpfsQoSDescs struct {
	iops, bytes, enabled typedDesc
}

func newGPFSQoSDescs() gpfsQoSDescs {
	labels := []string{"filesystem", "pool", "class"}
	return gpfsQoSDescs{
		// I/O operations per second of the QoS class in the storage
		// pool, over the newest interval mmlsqos reports.
		iops: gpfsGauge("qos_iops",
			"I/O operations per second of the QoS class in the storage pool (mmlsqos).", labels),
		// Bytes per second of the QoS class in the storage pool, over
		// the newest interval mmlsqos reports (its MBs, in MiB/s).
		bytes: gpfsGauge("qos_bytes_per_second",
			"Bytes per second of the QoS class in the storage pool (mmlsqos).", labels),
		// 1 if QoS throttling is enabled on the file system (mmlsqos
		// status: enabled and throttling), 0 if QoS is off or only
		// monitors.
		enabled: gpfsGauge("qos_enabled",
			"1 if QoS throttling is enabled on the file system (mmlsqos), else 0.",
			[]string{"filesystem"}),
	}
}

func (c *gpfsCollector) mmlsqos(ctx context.Context) ([]prometheus.Metric, error) {
	d := &c.qosDescs
	var ms []prometheus.Metric
	err := c.perFilesystem(ctx, "mmlsqos", c.cfg.mmlsqosPath, func(fsName string, out []byte) error {
		q, bad, err := parseMmlsqos(out)
		c.parseErrs.record(gpfsSourceMmlsqos, bad)
		if !q.hasStatus {
			return err
		}
		fsLabel := labelValue(fsName)
		enabled := 0.0
		if q.throttling {
			enabled = 1
		}
		ms = append(ms, d.enabled.mustNewConstMetric(enabled, fsLabel))
		seen := seenSet[[2]string]{}
		for _, s := range q.stats {
			key := [2]string{labelValue(s.pool), labelValue(s.class)}
			if !seen.first(key) {
				continue
			}
			l := newLabelPairs(d.iops.desc, fsLabel, key[0], key[1])
			ms = append(ms, l.metric(&d.iops, s.iops), l.metric(&d.bytes, s.mbs*(1<<20)))
		}
		return err
	})
	return ms, err
}
