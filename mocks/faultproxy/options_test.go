package faultproxy_test

import (
	"strings"
	"testing"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// TestNewJoinsEveryOptionError: every bad option is reported at once, a
// nil Option is named by its position, and nothing panics.
func TestNewJoinsEveryOptionError(t *testing.T) {
	p, err := faultproxy.New(
		faultproxy.WithUpstream("no-port"),
		nil,
		faultproxy.WithReplicaSet(""),
		faultproxy.WithDialTimeout(0),
	)
	if p != nil || err == nil {
		t.Fatalf("New = %v, %v; want an error", p, err)
	}
	for _, want := range []string{`upstream "no-port"`, "option 1 is nil", "empty replica set name", "dial timeout 0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// A nil script is no script, not an error.
	if _, err := faultproxy.New(faultproxy.WithScript(nil)); err != nil {
		t.Errorf("WithScript(nil): %v", err)
	}
}
