package main

import (
	"runtime/debug"
	"testing"

	"github.com/prometheus/common/version"
)

// A binary built without the release -ldflags (go run, go build) takes its
// version and revision from the build information Go embeds, instead of
// showing version= and revision=unknown on the status page.
func TestStampVersionFromBuildInfo(t *testing.T) {
	saved := [4]string{version.Version, version.Revision, version.Branch, version.BuildDate}
	t.Cleanup(func() {
		version.Version, version.Revision, version.Branch, version.BuildDate = saved[0], saved[1], saved[2], saved[3]
	})
	version.Version, version.Revision, version.Branch, version.BuildDate = "", "", "", ""
	stampVersion(func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "v0.9.1-0.20261206041505-f254482abcde"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "f254482abcdef"}, {Key: "vcs.time", Value: "2026-12-06T04:15:05Z"}, {Key: "vcs.modified", Value: "true"},
		}}, true
	})
	if version.Version != "v0.9.1-0.20261206041505-f254482abcde" || version.Revision != "f254482abcdef-dirty" || version.BuildDate != "2026-12-06T04:15:05Z" || version.Branch != "unknown" {
		t.Errorf("stamped %q %q %q %q", version.Version, version.Revision, version.BuildDate, version.Branch)
	}
	// go run: no module version, no VCS information.
	version.Version, version.Revision, version.Branch, version.BuildDate = "", "", "", ""
	stampVersion(func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true })
	if version.Version != "devel" {
		t.Errorf("go run: version %q, want devel", version.Version)
	}
	// The release build's -ldflags win.
	version.Version, version.Revision = "1.2.0", "abc"
	stampVersion(func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "v9"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "zzz"}}}, true
	})
	if version.Version != "1.2.0" || version.Revision != "abc" {
		t.Errorf("ldflags overridden: %q %q", version.Version, version.Revision)
	}
}
