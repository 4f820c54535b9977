package backtest

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CSVColumns names the columns of a CSV file of runs: the columns whose
// values together name a series, the run's start (Unix seconds) and its
// result.
type CSVColumns struct {
	Series []string
	Time   string
	Value  string
	// Labels are more columns kept in each series' Labels (the fleet's
	// group columns); each must have one value per series.
	Labels []string
	// FSBytes, JobBytes and End, when all three are in the header, give
	// each run the rate of everyone else's I/O during it, (FSBytes -
	// JobBytes) / (End - Time): the whole file system's bytes in the
	// run's direction less the run's own. A run with FSBytes empty has
	// none (NaN). Empty names, or columns the header lacks, read none.
	FSBytes, JobBytes, End string
	// Shape are columns that fix what a run does (its ranks, the bytes
	// it moves): a probe is one job measured again and again, so a
	// series whose runs recur in a few shapes is one series per shape
	// (shapeMinRuns). Columns the header lacks are left out.
	Shape []string
}

// A series is split by its shape columns when its runs recur in few
// shapes: the shapes with at least shapeMinRuns runs hold at least
// shapeCover of them. A column that takes a new value at most runs is a
// measurement, not a shape, and leaves the series whole.
const (
	shapeMinRuns = 10
	shapeCover   = 0.9
)

// ReadCSVFile reads the runs of a CSV file with a header line into
// series, each sorted by time.
func ReadCSVFile(path string, cols CSVColumns) ([]Series, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("backtest input: %w", err)
	}
	defer f.Close()
	return ReadCSV(f, path, cols)
}

// ReadCSV reads runs from r; name is the file's name in errors, which give
// its line and column.
func ReadCSV(r io.Reader, name string, cols CSVColumns) ([]Series, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	index := map[string]int{}
	for i, h := range header {
		index[strings.TrimSpace(h)] = i
	}
	column := func(flag, c string) (int, error) {
		i, ok := index[c]
		if !ok {
			return 0, fmt.Errorf("%s:1: no column %q (%s) in the header %q", name, c, flag, strings.Join(header, ","))
		}
		return i, nil
	}
	columns := func(flag string, names []string) ([]int, error) {
		var out []int
		for _, c := range names {
			i, err := column(flag, c)
			if err != nil {
				return nil, err
			}
			out = append(out, i)
		}
		return out, nil
	}
	keyCols, err := columns("--series-columns", cols.Series)
	if err != nil {
		return nil, err
	}
	if len(keyCols) == 0 {
		return nil, fmt.Errorf("%s: --series-columns names no column", name)
	}
	timeCol, err := column("--time-column", cols.Time)
	if err != nil {
		return nil, err
	}
	valueCol, err := column("--value-column", cols.Value)
	if err != nil {
		return nil, err
	}

	labelCols, err := columns("--group-columns", cols.Labels)
	if err != nil {
		return nil, err
	}
	// The others' load is optional: read where the file has its columns.
	fsCol, jobCol, endCol, others := -1, -1, -1, false
	if i, ok := index[cols.FSBytes]; ok && cols.FSBytes != "" {
		if j, ok := index[cols.JobBytes]; ok && cols.JobBytes != "" {
			if k, ok := index[cols.End]; ok && cols.End != "" {
				fsCol, jobCol, endCol, others = i, j, k, true
			}
		}
	}

	var shapeCols []int
	var shapeNames []string
	for _, c := range cols.Shape {
		if i, ok := index[c]; ok && c != "" && !slices.Contains(cols.Series, c) {
			shapeCols, shapeNames = append(shapeCols, i), append(shapeNames, c)
		}
	}

	type run struct {
		t      time.Time
		v      float64
		others float64
		shape  []string
	}
	byKey := map[string][]run{}
	labelsOf := map[string]map[string]string{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err) // a csv.ParseError names the line
		}
		line, _ := cr.FieldPos(0)
		parts := make([]string, len(keyCols))
		for i, c := range keyCols {
			parts[i] = rec[c]
		}
		key := strings.Join(parts, "/")
		sec, err := strconv.ParseFloat(strings.TrimSpace(rec[timeCol]), 64)
		if err != nil || math.IsNaN(sec) || math.IsInf(sec, 0) {
			return nil, fmt.Errorf("%s:%d: column %s: %q is not a Unix time in seconds", name, line, cols.Time, rec[timeCol])
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rec[valueCol]), 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s:%d: column %s: %q is not a result (a number, 0 or more)", name, line, cols.Value, rec[valueCol])
		}
		ls, seen := labelsOf[key]
		if !seen {
			ls = map[string]string{}
			for i, c := range keyCols {
				ls[cols.Series[i]] = rec[c]
			}
			for i, c := range labelCols {
				ls[cols.Labels[i]] = rec[c]
			}
			labelsOf[key] = ls
		}
		for i, c := range labelCols {
			if ls[cols.Labels[i]] != rec[c] {
				return nil, fmt.Errorf("%s:%d: column %s: %q, where earlier runs of series %s had %q: a group column must name one group per series", name, line, cols.Labels[i], rec[c], key, ls[cols.Labels[i]])
			}
		}
		load := math.NaN()
		if others && strings.TrimSpace(rec[fsCol]) != "" {
			load, err = othersRate(rec[fsCol], rec[jobCol], rec[endCol], sec)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
		}
		shape := make([]string, len(shapeCols))
		for i, c := range shapeCols {
			shape[i] = strings.TrimSpace(rec[c])
		}
		whole, frac := math.Modf(sec)
		byKey[key] = append(byKey[key], run{time.Unix(int64(whole), int64(frac*1e9)).UTC(), v, load, shape})
	}
	if len(byKey) == 0 {
		return nil, fmt.Errorf("%s: no runs after the header", name)
	}
	if len(shapeCols) > 0 {
		for _, key := range slices.Collect(maps.Keys(byKey)) {
			runs := byKey[key]
			shapes := map[string][]run{}
			for _, r := range runs {
				k := strings.Join(r.shape, "\x00")
				shapes[k] = append(shapes[k], r)
			}
			recurring := 0
			for _, rs := range shapes {
				if len(rs) >= shapeMinRuns {
					recurring += len(rs)
				}
			}
			if len(shapes) < 2 || float64(recurring) < shapeCover*float64(len(runs)) {
				continue
			}
			delete(byKey, key)
			for _, rs := range shapes {
				k := key + "/" + strings.Join(rs[0].shape, "/")
				byKey[k] = rs
				ls := maps.Clone(labelsOf[key])
				for i, v := range rs[0].shape {
					ls[shapeNames[i]] = v
				}
				labelsOf[k] = ls
			}
			delete(labelsOf, key)
		}
	}
	out := make([]Series, 0, len(byKey))
	for key, runs := range byKey {
		sort.SliceStable(runs, func(i, j int) bool { return runs[i].t.Before(runs[j].t) })
		s := Series{Key: key, Times: make([]time.Time, len(runs)), Values: make([]float64, len(runs)), Labels: labelsOf[key]}
		if others {
			s.Others = make([]float64, len(runs))
		}
		for i, r := range runs {
			s.Times[i], s.Values[i] = r.t, r.v
			if others {
				s.Others[i] = r.others
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// othersRate is everyone else's rate during a run: the file system's bytes
// less the run's own, over the run's duration. A run that moved more than
// the file system recorded (counters sampled around it) leaves 0.
func othersRate(fsBytes, jobBytes, end string, start float64) (float64, error) {
	fs, err := strconv.ParseFloat(strings.TrimSpace(fsBytes), 64)
	if err != nil || !(fs >= 0) || math.IsInf(fs, 0) {
		return 0, fmt.Errorf("file system bytes %q are not a number of bytes", fsBytes)
	}
	job, err := strconv.ParseFloat(strings.TrimSpace(jobBytes), 64)
	if err != nil || !(job >= 0) || math.IsInf(job, 0) {
		return 0, fmt.Errorf("job bytes %q are not a number of bytes", jobBytes)
	}
	stop, err := strconv.ParseFloat(strings.TrimSpace(end), 64)
	if err != nil || !(stop > start) || math.IsInf(stop, 0) {
		return 0, fmt.Errorf("end %q is not a Unix time after the run's start", end)
	}
	return math.Max(0, fs-job) / (stop - start), nil
}
