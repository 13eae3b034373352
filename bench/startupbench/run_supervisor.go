//go:build supervisor

package main

import (
	"context"
	"log/slog"

	"github.com/lifeboat-project/lifeboat/supervisor"
)

// run runs argv under lifeboat's supervisor with its defaults.
func run(argv []string) int {
	err := supervisor.Run(context.Background(), supervisor.Config{Argv: argv, Log: slog.New(slog.DiscardHandler)})
	return exitCode(err, supervisor.CodeInternal)
}
