// Package mocks holds test doubles for code that uses writeguard, and for
// writeguard's own tests: Fake, an in-memory collection with a script of
// faults; ReplyError, which turns a server reply into exactly the error
// the real driver returns for it; and NetworkError.
//
// Every server error these return is made by the real driver (v2) from a
// server reply, through its experimental drivertest.MockDeployment, so
// tests see the same types, codes, labels and errInfo as production code
// does. The one exception is PoolCleared's PoolClearedError: the driver's
// own type is unexported, so it is a look-alike with the same behaviour
// (Retryable() true, no code, no label).
// mocks/faultproxy is the wire-level counterpart, for tests with a real
// server.
package mocks
