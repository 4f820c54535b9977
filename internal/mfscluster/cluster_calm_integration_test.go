//go:build integration

package mfscluster_test

import (
	"testing"

	"github.com/plateau-exporter/plateau_exporter/internal/testkit/alertstack"
)

// checkCalm is fault g of TestClusterFaults: over the calm rounds since
// the stack started (startClusterFaults runs them, since every fault
// starts from them), no alert of any kind fired and nothing was notified.
func checkCalm(t *testing.T, s *alertstack.Stack) {
	t.Helper()
	s.LogPageMargins(t, s.Start)
	checkNoAlert(s, t, s.Start, `ALERTS`, "with no fault")
	checkNotifiedOnly(s, t, "g", s.Start, func(alertstack.ReceivedAlert) bool { return false }, "")
}
