package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The gpfs collector's waiter diagnosis runs "mmdiag --waiters -Y": the
// threads of the GPFS daemon that are waiting, how long, and on what. A long
// waiter is the usual first sign of I/O stuck behind a failing disk, a
// rebuild, a token or the network. Its table, as Storage Scale 5.x prints it
// (see gpfs_exporter's collectors/waiter_test.go for a real sample):
//
//	mmdiag:waiters:HEADER:version:reserved:reserved:threadId:threadAddr:threadName:waitStartTime:waitTime:isMonitored:condVarAddr:condVarName:condVarReason:mutexAddr:mutexName:auxReason:delayTime:delayReason:
//
// waitTime is in seconds. The reason is spread over condVarName,
// condVarReason, mutexName, auxReason and delayReason; it is free text
// (disk names, node addresses), so it is reduced to a small fixed set of
// classes and never used as a label.

// Waiter reason classes, in the order they are tested.
const (
	waiterRebuild = "rebuild"
	waiterToken   = "token"
	waiterIO      = "io"
	waiterNetwork = "network"
	waiterOther   = "other"
)

// gpfsWaiterClasses are exported at every run, 0 when no waiter has them,
// so that an alert sees a value rise rather than a series appear.
func gpfsWaiterClasses() [5]string {
	return [...]string{waiterIO, waiterNetwork, waiterToken, waiterRebuild, waiterOther}
}

// waiterClassRules map words of a waiter's thread name and reason text to a
// class; the first rule with a matching word wins. Rebuild and recovery
// come first: a RebuildWorkThread waiting "for I/O completion" is slow
// because of the rebuild. Token traffic is RPCs too, so it precedes the
// network; "NSD I/O completion" (a client waiting on its NSD server) is
// I/O even though it travels as an RPC.
func waiterClassRules() [4]struct {
	class string
	words []string
} {
	return [...]struct {
		class string
		words []string
	}{
		{waiterRebuild, []string{"rebuild", "recover", "restripe", "pg drain", "replay", "resync", "fsck", "log wrap"}},
		{waiterToken, []string{"token", "tmmsg", "revoke", "byte-range lock"}},
		{waiterIO, []string{"i/o", "nsd", "disk", "io completion", "aio", "flush"}},
		{waiterNetwork, []string{"rdma", "verbs", "rpc", "sock", "send", "recv", "connect", "conn ", "connection", "reconnect", "network", "tcp", "lease", "msg"}},
	}
}

// ignoredWaiterThreads wait all the time by design (gpfs_exporter excludes
// the same threads by default); counting them would make
// plateau_gpfs_waiter_longest_seconds always large.
func ignoredWaiterThreads() [2]string {
	return [...]string{"EventsExporterSenderThread", "FsckClientReaperThread"}
}

// classifyWaiter returns the class of a waiter from its thread name and
// reason text.
func classifyWaiter(thread, reason string) string {
	text := strings.ToLower(thread + " " + reason)
	for _, r := range waiterClassRules() {
		for _, w := range r.words {
			if strings.Contains(text, w) {
				return r.class
			}
		}
	}
	return waiterOther
}

// gpfsWaiters is what one mmdiag run showed.
type gpfsWaiters struct {
	count   map[string]int
	longest float64
}

// parseMmdiagWaiters parses "mmdiag --waiters -Y". No waiter at all is a
// HEADER without rows, or nothing: an idle daemon may print no table. A
// row it cannot read (a waitTime that is not a number, a row of a table
// with no HEADER, a line that is not -Y) is skipped and returned in bad;
// output with skipped lines but no waiters table fails, since reading
// nothing there would claim that no thread waits.
func parseMmdiagWaiters(out []byte) (gpfsWaiters, badLines, error) {
	w := gpfsWaiters{count: map[string]int{}}
	t, bad, err := parseYTable(out, "mmdiag --waiters -Y", "mmdiag", "waiters")
	if err != nil {
		return w, bad, err
	}
	if t == nil {
		return w, bad, missingYHeader("mmdiag --waiters -Y", "mmdiag", "waiters", bad)
	}
	timeCol, threadCol := t.column("waitTime"), t.column("threadName")
	if timeCol < 0 {
		return w, bad, errors.New("mmdiag --waiters -Y: no waitTime column in HEADER")
	}
	var reasonCols []int
	for _, name := range []string{"condVarName", "condVarReason", "mutexName", "auxReason", "delayReason"} {
		if col := t.column(name); col >= 0 {
			reasonCols = append(reasonCols, col)
		}
	}
	var reason strings.Builder
	read := 0
rows:
	for i, row := range t.rows {
		thread := t.value(row, threadCol)
		for _, ignored := range ignoredWaiterThreads() {
			if thread == ignored {
				read++
				continue rows
			}
		}
		seconds, err := parseLocaleFloat(t.value(row, timeCol))
		if err != nil || seconds < 0 {
			t.badRow(&bad, i, fmt.Sprintf("waitTime %q is not a number of seconds", t.value(row, timeCol)))
			continue
		}
		reason.Reset()
		for _, col := range reasonCols {
			reason.WriteString(t.value(row, col))
			reason.WriteByte(' ')
		}
		w.count[classifyWaiter(thread, reason.String())]++
		w.longest = max(w.longest, seconds)
		read++
	}
	if read == 0 && len(t.rows) > 0 {
		return w, bad, fmt.Errorf("mmdiag --waiters -Y: none of the %d waiter rows could be read (first %s)", len(t.rows), bad.first)
	}
	return w, bad, nil
}

type gpfsWaiterDescs struct {
	waiters, longest typedDesc
}

func newGPFSWaiterDescs() gpfsWaiterDescs {
	return gpfsWaiterDescs{
		// Threads of the GPFS daemon waiting now (mmdiag --waiters), by
		// a class derived from the waiter's thread and reason: rebuild
		// (rebuild, recovery, restripe), token (token and lock traffic),
		// io (disk and NSD I/O), network (RDMA, RPC, sockets), other.
		// Every class is exported, 0 when no waiter has it; threads that
		// always wait (EventsExporterSenderThread,
		// FsckClientReaperThread) are not counted.
		waiters: gpfsGauge("waiters",
			"Threads of the GPFS daemon waiting now (mmdiag --waiters), by class.",
			[]string{"reason_class"}),
		// How long the longest-waiting counted thread of the GPFS daemon
		// has waited (mmdiag --waiters), in seconds; 0 when none waits.
		longest: gpfsGauge("waiter_longest_seconds",
			"How long the longest-waiting counted thread of the GPFS daemon has waited, in seconds.",
			nil),
	}
}

func (c *gpfsCollector) waiters(ctx context.Context) ([]prometheus.Metric, error) {
	w, err := runGPFSParsed(ctx, c, gpfsCommandLine{path: c.cfg.mmdiagPath,
		args: []string{"--waiters", "-Y"}, source: gpfsSourceWaiters}, parseMmdiagWaiters)
	if err != nil {
		// Nothing usable: exporting zeros would claim no waiters.
		return nil, err
	}
	d := &c.waiterDescs
	classes := gpfsWaiterClasses()
	ms := make([]prometheus.Metric, 0, len(classes)+1)
	for _, class := range classes {
		ms = append(ms, d.waiters.mustNewConstMetric(float64(w.count[class]), class))
	}
	ms = append(ms, d.longest.mustNewConstMetric(w.longest))
	return ms, nil
}
