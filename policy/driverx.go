package policy

// Every use of the driver's x/ packages (no compatibility promise) by this
// package is in this file, pinned by driverx_test.go: a driver upgrade that
// changes one of these types fails there, in one place.

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// retryablePool is the driver's driver.RetryablePoolError: a connection
// pool error (the pool was cleared) raised before a connection was handed
// out, which the driver itself deems retryable.
type retryablePool interface{ Retryable() bool }

var _ retryablePool = driver.RetryablePoolError(nil)

// deadlineWouldBeExceeded reports the driver's refusal to send a command
// whose deadline leaves no time for it (CSOT spec).
func deadlineWouldBeExceeded(err error) bool {
	return errors.Is(err, driver.ErrDeadlineWouldBeExceeded)
}

// unsupportedStorageEngine reports the error the driver returns in place of
// the server's 20 IllegalOperation "Transaction numbers are only allowed on
// a replica set member or mongos".
func unsupportedStorageEngine(err error) bool {
	return errors.Is(err, driver.ErrUnsupportedStorageEngine)
}

// serverSelection reports a server selection failure: nothing was sent.
func serverSelection(err error) bool {
	return errors.As(err, new(topology.ServerSelectionError))
}

// checkout reports a failure to obtain a connection before anything was
// written to it: the pool was cleared (retryable pool error), the checkout
// wait timed out (topology.WaitQueueTimeoutError), or the connection could
// not be established or its handshake failed (a topology.ConnectionError
// that the driver did not label NetworkError: the driver labels errors of
// a connection the command was written to).
func checkout(err error) bool {
	var rp retryablePool
	if errors.As(err, &rp) && rp.Retryable() {
		return true
	}
	if errors.As(err, new(topology.WaitQueueTimeoutError)) {
		return true
	}
	return errors.As(err, new(topology.ConnectionError))
}
