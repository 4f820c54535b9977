package plateau

import (
	"github.com/plateau-exporter/plateau_exporter/probe"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// The history file keeps each probe op's last HistoryRuns results across
// restarts of the daemon, so that the change statistic does not vanish for
// MinNormalRuns+2*ChangeRuns-1 runs (hours at a typical interval) after
// every upgrade or reboot. It is state, not configuration: the daemon
// rewrites it after every successful run, and a file it cannot read is set
// aside rather than trusted, since wrong history would give a wrong normal.

// historyVersion is the format of the file; a file of another version is
// not read (a newer daemon may have changed what results mean).
const historyVersion = 1

// HistoryKey names one op's history. Params (ProbeParams of the probe) is
// part of it so that a probe whose size or workers changed starts anew:
// its results measure something else than those before.
type HistoryKey struct {
	Target, Probe, Op, Params string
}

// HistoryEntry is an op's successful results, oldest first, and when the
// last one was added.
type HistoryEntry struct {
	Results []float64
	Updated time.Time
}

// History is the results of every probe op, as the file holds them.
type History map[HistoryKey]HistoryEntry

type historyFile struct {
	Version int            `json:"version"`
	Entries []historyEntry `json:"entries"`
}

type historyEntry struct {
	Target  string    `json:"target"`
	Probe   string    `json:"probe"`
	Op      string    `json:"op"`
	Params  string    `json:"params"`
	Results []float64 `json:"results"`
	// Updated is a string, not a time.Time, so that a bad time is reported
	// with its entry rather than as a decoding error of the whole file.
	Updated string `json:"updated"`
}

// LoadHistoryFile reads a history file. A missing file is an empty history,
// not an error: there is none before the first run. Errors name the file
// and, for an invalid entry, the entry.
func LoadHistoryFile(path string) (History, error) {
	data, err := probe.ReadFileLimited(path, probe.MaxHistoryBytes)
	if errors.Is(err, os.ErrNotExist) {
		return History{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	h, err := ParseHistory(data)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	return h, nil
}

// ParseHistory parses the text of a history file.
func ParseHistory(data []byte) (History, error) {
	var f historyFile
	if err := json.Unmarshal(data, &f); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := lineCol(data, syn.Offset)
			return nil, fmt.Errorf("line %d, column %d: %w", line, col, err)
		}
		return nil, err
	}
	if f.Version != historyVersion {
		return nil, fmt.Errorf("version %d, want %d", f.Version, historyVersion)
	}
	h := make(History, len(f.Entries))
	for i, e := range f.Entries {
		k := HistoryKey{e.Target, e.Probe, e.Op, e.Params}
		entry, err := e.check(k, h)
		if err != nil {
			return nil, fmt.Errorf("entry %d (target %q, probe %q, op %q): %w", i+1, e.Target, e.Probe, e.Op, err)
		}
		h[k] = entry
	}
	return h, nil
}

func (e *historyEntry) check(k HistoryKey, seen History) (HistoryEntry, error) {
	if e.Target == "" || e.Probe == "" || e.Op == "" {
		return HistoryEntry{}, errors.New("target, probe and op are required")
	}
	if _, dup := seen[k]; dup {
		return HistoryEntry{}, errors.New("duplicates an earlier entry")
	}
	if len(e.Results) > HistoryRuns {
		return HistoryEntry{}, fmt.Errorf("%d results, at most %d are kept", len(e.Results), HistoryRuns)
	}
	for j, v := range e.Results {
		// JSON cannot spell NaN or Inf, but a number too large for a
		// float64 decodes as an error; negative rates are not results.
		if !(v >= 0) || math.IsInf(v, 0) {
			return HistoryEntry{}, fmt.Errorf("result %d is %v, want a finite rate >= 0", j+1, v)
		}
	}
	updated, err := time.Parse(time.RFC3339, e.Updated)
	// Written back in UTC, a time near year 0 or 9999 in another zone
	// would become a year RFC 3339 cannot spell.
	if y := updated.UTC().Year(); err != nil || y < 1 || y > 9999 {
		return HistoryEntry{}, fmt.Errorf("updated %q is not an RFC 3339 time", e.Updated)
	}
	return HistoryEntry{Results: e.Results, Updated: updated}, nil
}

// lineCol converts a byte offset of data to a 1-based line and column.
func lineCol(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col
}

// Marshal renders the history in the file format, entries sorted so that
// two writes of the same history are the same bytes.
func (h History) Marshal() ([]byte, error) {
	keys := make([]HistoryKey, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		if a.Probe != b.Probe {
			return a.Probe < b.Probe
		}
		if a.Params != b.Params {
			return a.Params < b.Params
		}
		return a.Op < b.Op
	})
	f := historyFile{Version: historyVersion, Entries: make([]historyEntry, 0, len(keys))}
	for _, k := range keys {
		e := h[k]
		results := e.Results
		if results == nil {
			results = []float64{} // [] in the file, not null
		}
		f.Entries = append(f.Entries, historyEntry{Target: k.Target, Probe: k.Probe, Op: k.Op, Params: k.Params,
			Results: results, Updated: e.Updated.UTC().Format(time.RFC3339)})
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// WriteHistoryFile saves the history atomically: a temporary file in the
// same directory (so the rename cannot cross file systems), fsynced, then
// renamed over path, so a crash or a full disk leaves the old file or the
// new one, never half of one. The mode is 0640, as the unit's UMask=0027
// would make it: history reveals nothing secret, but nobody else needs it.
func WriteHistoryFile(path string, h History) error {
	data, err := h.Marshal()
	if err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	// A dot name that does not match <path>.corrupt-*, so a leftover of a
	// crash is neither read nor mistaken for a file set aside.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o640); err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("history %s: %w", path, err)
	}
	done = true
	// The rename is durable once the directory is synced. Best effort:
	// some file systems refuse fsync on a directory, and the file itself
	// is complete either way.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// SetAsideHistoryFile renames a history file that could not be loaded to
// <path>.corrupt-<UTC time> and returns the new name. The file is kept,
// never deleted, so that whoever investigates the warning has it; an
// existing name is never overwritten.
func SetAsideHistoryFile(path string, now time.Time) (string, error) {
	stamp := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	for i := 0; ; i++ {
		name := stamp
		if i > 0 {
			name = fmt.Sprintf("%s-%d", stamp, i)
		}
		if _, err := os.Lstat(name); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("history %s: set aside: %w", path, err)
		}
		if err := os.Rename(path, name); err != nil {
			return "", fmt.Errorf("history %s: set aside: %w", path, err)
		}
		return name, nil
	}
}
