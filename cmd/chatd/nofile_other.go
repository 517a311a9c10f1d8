//go:build !linux

package main

import "log/slog"

// raiseFileLimit does nothing outside Linux: the system's limit stands.
func raiseFileLimit(*slog.Logger) {}
