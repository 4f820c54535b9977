// Package daemonlog builds the daemon's go-kit logger (--log.level,
// --log.format) and the slog bridge exporter-toolkit logs through, so that
// every line, the toolkit's included, has one ts and one caller.
package daemonlog

import (
	"io"
	"log/slog"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	slgokit "github.com/tjhop/slog-gokit"
)

// daemonLogger is the go-kit logger every part of the daemon uses, with
// the same logger before the timestamp and caller were added, for the slog
// bridge: a slog record carries its own time and source, and through the
// full logger each line of exporter-toolkit said caller= twice (the
// bridge's line, then the real one) and its time twice.
type daemonLogger struct {
	log.Logger
	bare log.Logger
}

// New builds the go-kit logger every part of the daemon uses.
func New(lvl, format string, w io.Writer) log.Logger {
	var l log.Logger
	if format == "json" {
		l = log.NewJSONLogger(log.NewSyncWriter(w))
	} else {
		l = log.NewLogfmtLogger(log.NewSyncWriter(w))
	}
	filter := level.Allow(level.ParseDefault(lvl, level.InfoValue()))
	// Caller depth 5 skips the level and filter wrappers to name the
	// line that logged.
	full := log.With(l, "ts", log.TimestampFormat(time.Now, time.RFC3339Nano), "caller", log.Caller(5))
	return daemonLogger{Logger: level.NewFilter(full, filter), bare: level.NewFilter(l, filter)}
}

// Slog bridges to the *slog.Logger that exporter-toolkit wants, so its
// messages land in the same stream and format, each with one ts and one
// caller: the record's.
func Slog(l log.Logger, lvl string) *slog.Logger {
	sl := slog.LevelInfo
	switch lvl {
	case "debug":
		sl = slog.LevelDebug
	case "warn":
		sl = slog.LevelWarn
	case "error":
		sl = slog.LevelError
	}
	if d, ok := l.(daemonLogger); ok {
		l = renameKey(d.bare, "time", "ts")
	}
	return slog.New(slgokit.NewGoKitHandler(l, sl))
}

// renameKey renames one key of every line: the bridge's "time" becomes
// the daemon's "ts", so that a line of exporter-toolkit reads as the
// daemon's own.
func renameKey(next log.Logger, from, to string) log.Logger {
	return log.LoggerFunc(func(kv ...any) error {
		out := make([]any, len(kv))
		copy(out, kv)
		for i := 0; i+1 < len(out); i += 2 {
			if k, ok := out[i].(string); ok && k == from {
				out[i] = to
			}
		}
		return next.Log(out...)
	})
}
