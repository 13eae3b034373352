//go:build supervisor

package main

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/lifeboat-project/lifeboat/supervisor"
)

// run runs argv under lifeboat's supervisor with its defaults.
func run(argv []string) int {
	err := supervisor.Run(context.Background(), supervisor.Config{Argv: argv, Log: slog.New(slog.DiscardHandler)})
	var ee *supervisor.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	os.Stderr.WriteString(err.Error() + "\n")
	return supervisor.CodeInternal
}
