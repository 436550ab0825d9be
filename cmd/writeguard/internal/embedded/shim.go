// Package embedded forwards to github.com/writeguard/writeguard/cmd/writeguard/embedded.
//
// Deprecated: import cmd/writeguard/embedded; this shim goes away once
// every caller has moved.
package embedded

import (
	"context"

	real "github.com/writeguard/writeguard/cmd/writeguard/embedded"
)

type (
	// Server is embedded.Server.
	Server = real.Server
	// Option is embedded.Option.
	Option = real.Option
)

var (
	// WithDataDir is embedded.WithDataDir.
	WithDataDir = real.WithDataDir
	// WithLogger is embedded.WithLogger.
	WithLogger = real.WithLogger
)

// Start is embedded.Start.
func Start(ctx context.Context, opts ...Option) (*Server, error) { return real.Start(ctx, opts...) }
