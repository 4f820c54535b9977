package backtest

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
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
}

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
	var keyCols []int
	for _, c := range cols.Series {
		i, err := column("--series-columns", c)
		if err != nil {
			return nil, err
		}
		keyCols = append(keyCols, i)
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

	type run struct {
		t time.Time
		v float64
	}
	byKey := map[string][]run{}
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
		whole, frac := math.Modf(sec)
		byKey[key] = append(byKey[key], run{time.Unix(int64(whole), int64(frac*1e9)).UTC(), v})
	}
	if len(byKey) == 0 {
		return nil, fmt.Errorf("%s: no runs after the header", name)
	}
	out := make([]Series, 0, len(byKey))
	for key, runs := range byKey {
		sort.SliceStable(runs, func(i, j int) bool { return runs[i].t.Before(runs[j].t) })
		s := Series{Key: key, Times: make([]time.Time, len(runs)), Values: make([]float64, len(runs))}
		for i, r := range runs {
			s.Times[i], s.Values[i] = r.t, r.v
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
