package main

import (
	"io"
	"log/slog"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	slgokit "github.com/tjhop/slog-gokit"
)

// newLogger builds the go-kit logger every part of the daemon uses.
func newLogger(lvl, format string, w io.Writer) log.Logger {
	var l log.Logger
	if format == "json" {
		l = log.NewJSONLogger(log.NewSyncWriter(w))
	} else {
		l = log.NewLogfmtLogger(log.NewSyncWriter(w))
	}
	// Caller depth 5 skips the level and filter wrappers to name the
	// line that logged.
	l = log.With(l, "ts", log.TimestampFormat(time.Now, time.RFC3339Nano), "caller", log.Caller(5))
	return level.NewFilter(l, level.Allow(level.ParseDefault(lvl, level.InfoValue())))
}

// slogFor bridges to the *slog.Logger that exporter-toolkit wants, so its
// messages land in the same stream and format.
func slogFor(l log.Logger, lvl string) *slog.Logger {
	sl := slog.LevelInfo
	switch lvl {
	case "debug":
		sl = slog.LevelDebug
	case "warn":
		sl = slog.LevelWarn
	case "error":
		sl = slog.LevelError
	}
	return slog.New(slgokit.NewGoKitHandler(l, sl))
}
