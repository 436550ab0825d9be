package policy

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// Pins the driver behaviour driverx.go relies on: the x/ error types and
// how each one's shape is read. A driver upgrade that renames or reshapes
// one of them fails here.
func TestDriverXShapes(t *testing.T) {
	labelled := func(err error) error {
		// The driver labels errors on a connection the command was written
		// to (operation.go networkError) and the mongo package lifts them
		// into a CommandError (wrapErrors).
		return mongo.CommandError{Labels: []string{"NetworkError"}, Wrapped: err}
	}
	cases := []struct {
		name  string
		err   error
		shape Shape
		proof Proof
	}{
		{"deadline would be exceeded", fmt.Errorf("op: %w", driver.ErrDeadlineWouldBeExceeded), ShapeTimeoutBeforeSend, NotSent},
		{"server selection", topology.ServerSelectionError{Wrapped: context.DeadlineExceeded}, ShapeServerSelection, NotSent},
		{"wait queue timeout", topology.WaitQueueTimeoutError{Wrapped: context.DeadlineExceeded}, ShapeCheckout, NotSent},
		{"handshake (unlabelled connection error)", topology.ConnectionError{Wrapped: errors.New("EOF")}, ShapeCheckout, NotSent},
		{"connection error in flight", labelled(topology.ConnectionError{Wrapped: errors.New("EOF")}), ShapeNetworkInFlight, MaybeApplied},
		{"deadline in flight", labelled(topology.ConnectionError{Wrapped: context.DeadlineExceeded}), ShapeTimeoutInFlight, MaybeApplied},
		{"unsupported storage engine", driver.ErrUnsupportedStorageEngine, ShapeConfiguration, NotApplied},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := Extract(c.err)[0]
			if f.Shape != c.shape || f.Proof() != c.proof {
				t.Errorf("shape %s proof %s, want %s %s", f.Shape, f.Proof(), c.shape, c.proof)
			}
			if Default().Classify(f) == Unknown {
				t.Errorf("class unknown: the driver deems this retryable or it names a setting")
			}
		})
	}
}

// The driver's pool-cleared error is unexported; what writeguard relies on
// is its interface, driver.RetryablePoolError, with Retryable() true.
func TestDriverXRetryablePoolInterface(t *testing.T) {
	var rp driver.RetryablePoolError = poolCleared{}
	f := Extract(fmt.Errorf("checkout: %w", rp.(error)))[0]
	if f.Shape != ShapeCheckout || f.Ambiguous || Default().Classify(f) != Transient {
		t.Errorf("pool cleared: shape %s ambiguous %v class %s, want checkout, false, transient", f.Shape, f.Ambiguous, Default().Classify(f))
	}
}

type poolCleared struct{}

func (poolCleared) Error() string   { return "connection pool for h:1 was cleared" }
func (poolCleared) Retryable() bool { return true }
