//go:build integration

package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/plateau-exporter/plateau_exporter/internal/probefixture"
	"github.com/plateau-exporter/plateau_exporter/internal/testkit/probetest"
	"github.com/plateau-exporter/plateau_exporter/probe"
)

// As root, a 0700 directory another user made at the created path's name
// is refused: root could write into it, and that user would then own
// what the daemon believes is its own directory.
func TestCreatedPathOtherOwnerRefused(t *testing.T) {
	probetest.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "plateau_exporter-0")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	req := probefixture.Request(path, probefixture.SmallSeq("s"))
	req.CreatePath = true
	res := Execute(context.Background(), req)
	if res.OK() || res.Reason != probe.ReasonUnsafe || !strings.Contains(res.Error, "uid 65534") {
		t.Errorf("run in a directory owned by uid 65534: ok=%v reason %q error %q; want refused (unsafe)", res.OK(), res.Reason, res.Error)
	}
	if ents, _ := os.ReadDir(path); len(ents) != 0 {
		t.Errorf("the run wrote into the other user's directory: %v", ents)
	}
}
