package yamlfield

import (
	"testing"
)

// A syntax error names the line where the document goes wrong, not the one
// where the block around it began.
func TestSyntaxErrorNamesTheLineThatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"key indented one space short", "targets:\n  - name: scratch\n    path: /tmp\n   probes:\n      - {name: md}\n", "p.yml:4: did not find expected '-' indicator"},
		{"flow mapping not closed", "targets:\n  - name: scratch\n    path: /tmp\n    probes:\n      - {name: md, kind: metadata\n", "p.yml:5: did not find expected ',' or '}'"},
		{"flow sequence not closed", "targets:\n  e2e: [\n", "p.yml:2: did not find expected node content"},
		{"tab indentation", "targets:\n\t- name: x\n", "p.yml:2: found character that cannot start any token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "p.yml")
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %s", err, tc.want)
			}
		})
	}
}

func FuzzSyntaxError(f *testing.F) {
	f.Add([]byte("targets:\n  - name: scratch\n   probes:\n"))
	f.Add([]byte("a: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		if _, err := Parse(data, "f.yml"); err != nil {
			e, ok := err.(*Error)
			if !ok || e.Line < 0 {
				t.Fatalf("error %v", err)
			}
		}
	})
}
