//go:build integration

package dashboards

import "testing"

// checkCalm is fault g of TestClusterFaults: over the calm rounds since
// the stack started (startClusterFaults runs them, since every fault
// starts from them), no alert of any kind fired and nothing was notified.
func checkCalm(t *testing.T, s *alertStack) {
	t.Helper()
	s.checkNoAlert(t, s.start, `ALERTS`, "with no fault")
	s.checkNotifiedOnly(t, "g", s.start, func(receivedAlert) bool { return false }, "")
}
