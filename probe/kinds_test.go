package probe

import (
	"strings"
	"testing"
)

func TestKindKeyChecks(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"{name: a, kind: shared_file, segment_size: 3MiB, block_size: 2MiB}", "segment_size: must be a positive multiple of block_size"},
		{"{name: a, kind: metadata, files: 0}", "files: must be between 1"},
		{"{name: a, kind: metadata, block_size: 4KiB}", "block_size: does not apply to kind \"metadata\""},
		{"{name: a, kind: shared_file, file_size: 1GiB}", "file_size: does not apply to kind \"shared_file\""},
		{"{name: a, kind: sequential, read_after: -1h}", "read_after: must not be negative"},
	} {
		_, err := ParseConfig([]byte("targets:\n  - name: t\n    path: /tmp\n    probes:\n      - "+tc.yaml+"\n"), "c.yml")
		if err == nil || !strings.Contains(err.Error(), "c.yml:5: targets[0].probes[0]."+tc.want) {
			t.Errorf("%s: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
