package probe

import "testing"

// A storage server's own target names the clients' target of the file
// system it serves; other targets serve nothing.
func TestServesNamesTheClientsTarget(t *testing.T) {
	cfg, err := ParseConfig([]byte(`targets:
  - name: ost0-disk
    path: /srv/ost0/.plateau
    serves: scratch
    probes:
      - {name: s, kind: sequential, file_size: 16MiB, block_size: 1MiB}
  - name: home
    path: /tmp
    probes:
      - {name: m, kind: metadata}
`), "cfg.yml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Target("ost0-disk").Serves; got != "scratch" {
		t.Errorf("ost0-disk serves %q, want scratch", got)
	}
	if got := cfg.Target("home").Serves; got != "" {
		t.Errorf("home serves %q, want nothing", got)
	}
}

func TestBadServesNameLineAndField(t *testing.T) {
	const probes = "    probes:\n      - {name: s, kind: sequential}\n"
	checkConfigErrors(t, []configError{
		{"empty", "targets:\n  - name: a\n    path: /tmp\n    serves: \"\"\n" + probes, "cfg.yml:4: targets[0].serves: \"\": the name of the clients' target"},
		{"not a name", "targets:\n  - name: a\n    path: /tmp\n    serves: \"scratch fs\"\n" + probes, "cfg.yml:4: targets[0].serves: \"scratch fs\": the name of the clients' target"},
		{"a list", "targets:\n  - name: a\n    path: /tmp\n    serves: [scratch]\n" + probes, "cfg.yml:4: targets[0].serves: must be a single value"},
		{"its own name", "targets:\n  - name: scratch\n    path: /tmp\n    serves: scratch\n" + probes, "cfg.yml:4: targets[0].serves: \"scratch\" is this target's own name"},
		{"with servers", "targets:\n  - name: a\n    path: /tmp/{server}\n    servers: [\"0\"]\n    serves: scratch\n" + probes, "cfg.yml:5: targets[0].serves: a target with servers is the clients' view"},
	})
}
