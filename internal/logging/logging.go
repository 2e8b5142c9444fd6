// Package logging builds the zap loggers of the binaries: JSON by default,
// human-readable console output on a terminal, and warnings and errors
// sampled so that a repeated failure (a server down) cannot flood the log.
package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// Options for New.
type Options struct {
	Level  string    // debug | info | warn | error (default info)
	Format string    // auto | json | console (default auto: console on a terminal)
	Out    io.Writer // default os.Stderr
}

// New returns a logger. Warnings and errors with the same message are
// sampled per second (the first 5, then every 100th).
func New(o Options) (*zap.Logger, error) {
	if o.Out == nil {
		o.Out = os.Stderr
	}
	lvl := zapcore.InfoLevel
	if o.Level != "" {
		if err := lvl.Set(o.Level); err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", o.Level)
		}
	}
	var enc zapcore.Encoder
	switch o.Format {
	case "", "auto":
		if isTerminal(o.Out) {
			enc = consoleEncoder()
		} else {
			enc = jsonEncoder()
		}
	case "json":
		enc = jsonEncoder()
	case "console":
		enc = consoleEncoder()
	default:
		return nil, fmt.Errorf("log format %q: want auto, json or console", o.Format)
	}
	ws := zapcore.Lock(zapcore.AddSync(o.Out))
	quiet := zapcore.NewCore(enc, ws, zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= lvl && l < zapcore.WarnLevel }))
	loud := zapcore.NewSamplerWithOptions(
		zapcore.NewCore(enc, ws, zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= lvl && l >= zapcore.WarnLevel })),
		time.Second, 5, 100)
	return zap.New(zapcore.NewTee(quiet, loud)), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func jsonEncoder() zapcore.Encoder {
	c := zap.NewProductionEncoderConfig()
	c.EncodeTime = zapcore.ISO8601TimeEncoder
	c.TimeKey = "time"
	c.EncodeDuration = zapcore.StringDurationEncoder
	return zapcore.NewJSONEncoder(c)
}

func consoleEncoder() zapcore.Encoder {
	c := zap.NewDevelopmentEncoderConfig()
	c.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	c.EncodeLevel = zapcore.CapitalColorLevelEncoder
	return zapcore.NewConsoleEncoder(c)
}
