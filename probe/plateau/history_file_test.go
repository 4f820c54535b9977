package plateau

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleHistory() History {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	return History{
		{"scratch", "seq", "write", "sequential workers=1 file_size=256MiB block_size=8MiB"}: {Results: []float64{1.2e9, 1.1e9, 1.25e9}, Updated: at},
		{"scratch", "seq", "read", "sequential workers=1 file_size=256MiB block_size=8MiB"}:  {Results: []float64{2.1e9, 0, 2.05e9}, Updated: at},
		{"home", "md", "create", "metadata workers=2 files=64"}:                              {Results: []float64{}, Updated: at.Add(time.Hour)},
	}
}

func TestHistoryFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.json")
	want := sampleHistory()
	if err := WriteHistoryFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadHistoryFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\ngot  %v\nwant %v", got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	// A second write replaces the file and leaves no temporary behind.
	if err := WriteHistoryFile(path, History{}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d files after two writes, want the history alone", len(entries))
	}
	if got, err := LoadHistoryFile(path); err != nil || len(got) != 0 {
		t.Errorf("after writing an empty history: %v, %v", got, err)
	}
}

// The file is for people too: version first, one entry per op, sorted.
func TestHistoryFileFormat(t *testing.T) {
	data, err := sampleHistory().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if !strings.HasPrefix(s, "{\n  \"version\": 1,") {
		t.Errorf("file does not start with its version:\n%s", s)
	}
	for _, want := range []string{`"target": "scratch"`, `"probe": "seq"`, `"op": "write"`, `"params": "sequential workers=1`, `"updated": "2026-11-30T10:00:00Z"`, `"results": []`} {
		if !strings.Contains(s, want) {
			t.Errorf("file lacks %s:\n%s", want, s)
		}
	}
	if strings.Index(s, `"home"`) > strings.Index(s, `"scratch"`) || strings.Index(s, `"op": "read"`) > strings.Index(s, `"op": "write"`) {
		t.Errorf("entries not sorted by target, probe, params, op:\n%s", s)
	}
	again, _ := sampleHistory().Marshal()
	if !bytes.Equal(data, again) {
		t.Error("two renderings of one history differ")
	}
}

func TestHistoryFileMissingIsEmpty(t *testing.T) {
	h, err := LoadHistoryFile(filepath.Join(t.TempDir(), "none.json"))
	if err != nil || h == nil || len(h) != 0 {
		t.Fatalf("missing file: %v, %v; want an empty history", h, err)
	}
}

func TestHistoryFileErrorsNameFileAndEntry(t *testing.T) {
	entry := func(results string) string {
		return `{"version": 1, "entries": [
  {"target": "t", "probe": "s", "op": "write", "params": "p", "results": [1, 2], "updated": "2026-11-30T10:00:00Z"},
  {"target": "t", "probe": "s", "op": "read", "params": "p", "results": ` + results + `, "updated": "2026-11-30T10:00:00Z"}]}`
	}
	tooMany := "[" + strings.TrimSuffix(strings.Repeat("1,", HistoryRuns+1), ",") + "]"
	for _, c := range []struct{ name, data, want string }{
		{"bad JSON", "{\"version\": 1,\n \"entries\": [}", "line 2, column"},
		{"not JSON", "\x00garbage", "invalid character"},
		{"trailing garbage", `{"version": 1, "entries": []} x`, "invalid character"},
		{"no version", `{"entries": []}`, "version 0, want 1"},
		{"newer version", `{"version": 2, "entries": []}`, "version 2, want 1"},
		{"negative result", entry("[3, -1]"), `entry 2 (target "t", probe "s", op "read"): result 2 is -1`},
		{"huge result", entry("[1e400]"), "1e400"},
		{"string result", entry(`["x"]`), "cannot unmarshal string"},
		{"too many results", entry(tooMany), `entry 2 (target "t", probe "s", op "read"): 38 results, at most 37`},
		{"bad time", strings.Replace(entry("[1]"), "2026-11-30T10:00:00Z\"}]", "yesterday\"}]", 1), `entry 2 (target "t", probe "s", op "read"): updated "yesterday"`},
		{"duplicate", strings.Replace(entry("[1]"), `"read"`, `"write"`, 1), `entry 2 (target "t", probe "s", op "write"): duplicates`},
		{"no op", strings.Replace(entry("[1]"), `"op": "read"`, `"op": ""`, 1), "entry 2 (target \"t\", probe \"s\", op \"\"): target, probe and op are required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "history.json")
			if err := os.WriteFile(path, []byte(c.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadHistoryFile(path)
			if err == nil {
				t.Fatal("loaded without error")
			}
			if !strings.HasPrefix(err.Error(), "history "+path+": ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to name %s and say %q", err, path, c.want)
			}
		})
	}
}

// A file set aside is renamed, never deleted nor overwritten: two in the
// same second both survive.
func TestSetAsideHistoryFileKeepsEveryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "history.json")
	now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.FixedZone("CET", 3600))
	var names []string
	for _, content := range []string{"first", "second"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		name, err := SetAsideHistoryFile(path, now)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if want := path + ".corrupt-20261201T083000Z"; names[0] != want {
		t.Errorf("set aside as %s, want %s (UTC)", names[0], want)
	}
	for i, want := range []string{"first", "second"} {
		if got, err := os.ReadFile(names[i]); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", names[i], got, err, want)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s still there after being set aside: %v", path, err)
	}
}

// FuzzHistoryFile: whatever the file holds, loading it does not panic, and
// what it accepts it writes back in a form it reads the same.
func FuzzHistoryFile(f *testing.F) {
	seed, err := sampleHistory().Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"version": 1, "entries": null}`))
	f.Add([]byte(`{"version": 1, "entries": [{"target": "t", "probe": "s", "op": "w", "params": "", "results": [-0, 1e308], "updated": "0001-01-01T00:30:00+01:00"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHistory(data)
		if err != nil {
			return
		}
		out, err := h.Marshal()
		if err != nil {
			t.Fatalf("accepted history does not marshal: %v", err)
		}
		h2, err := ParseHistory(out)
		if err != nil {
			t.Fatalf("written history does not parse: %v\n%s", err, out)
		}
		again, err := h2.Marshal()
		if err != nil || !bytes.Equal(out, again) {
			t.Fatalf("history changes when read back:\n%s\n%s", out, again)
		}
	})
}
