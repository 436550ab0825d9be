package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/writeguard/writeguard/cmd/writeguard/embedded"
)

// dlServer is the embedded FerretDB shared by the dead-letter tests
// (dlq_*_test.go), which keep apart by using one database each. Tests
// that need a server of their own (the case bed) start one.
var dlServer *embedded.Server

// TestMain starts the shared server, runs the tests, closes it, and then
// fails the package if any goroutine is left running (a client not
// disconnected, a proxy or server not closed).
func TestMain(m *testing.M) {
	ctx := context.Background()
	s, err := embedded.Start(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: starting the embedded server: %v\n", err)
		os.Exit(1)
	}
	dlServer = s
	code := m.Run()
	if dlBinDir != "" {
		_ = os.RemoveAll(dlBinDir) // the command built by dlCommandBinary
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := s.Close(cctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: closing the embedded server: %v\n", err)
		code = 1
	}
	cancel()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
