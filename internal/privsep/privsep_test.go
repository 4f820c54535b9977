package privsep

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadStatus(t *testing.T) {
	status := `Name:	plateau_exporter
Umask:	0027
CapInh:	0000000000000000
CapPrm:	0000000000200000
CapEff:	0000000000200000
CapBnd:	0000000000200000
CapAmb:	0000000000000000
NoNewPrivs:	1
`
	file := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(file, []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadStatus(file)
	if err != nil {
		t.Fatal(err)
	}
	want := Sets{Permitted: MaskSysAdmin, Effective: MaskSysAdmin, Bounding: MaskSysAdmin}
	if s != want || s.Empty() {
		t.Fatalf("ReadStatus = %s, want %s", s, want)
	}
	if !(Sets{Bounding: ^uint64(0)}).Empty() {
		t.Error("a task with only a bounding set is not empty")
	}

	truncated := strings.Replace(status, "CapAmb:	0000000000000000\n", "", 1)
	if err := os.WriteFile(file, []byte(truncated), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatus(file); err == nil {
		t.Error("a status file without CapAmb was accepted")
	}
	if _, err := Self(); err != nil {
		t.Errorf("Self: %v", err)
	}
}

func TestCapsetArgsSplitsWords(t *testing.T) {
	h, d := capsetArgs(1<<40|MaskSysAdmin, MaskSysAdmin, 0)
	if h.version == 0 || d[0].effective != uint32(MaskSysAdmin) || d[1].effective != 1<<8 || d[0].permitted != uint32(MaskSysAdmin) || d[1].permitted != 0 || d[0].inheritable|d[1].inheritable != 0 {
		t.Fatalf("capsetArgs: %+v %+v", h, d)
	}
}
