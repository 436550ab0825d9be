package policy

import "strconv"

// Class is what a classifier decides about a Failure: how the failed
// document or command is routed.
type Class uint8

const (
	// Unknown: no rule matched. writeguard never retries an Unknown failure
	// (default-deny), surfaces it to the caller as failed, and counts it
	// loudly (hooks, metrics, a log record with the code).
	Unknown Class = iota
	// Transient: the same write can succeed later (stepdown, network drop,
	// write conflict). Retried with backoff within the retry budget.
	Transient
	// Throttled: the server asked the client to slow down (overload,
	// rate limit). Retried after the server's delay, or the backoff when it
	// gave none, whichever is longer.
	Throttled
	// Invalid: the document itself is rejected and will be rejected again
	// (121 DocumentValidationFailure, marshal errors). Sent to the
	// dead-letter sink, never retried.
	Invalid
	// Conflict: a unique index rejected the document (11000 DuplicateKey).
	// Handed to the conflict handler, never retried blindly.
	Conflict
	// Configuration: the deployment or the client's settings are wrong for
	// this write (20 IllegalOperation "Transaction numbers are only
	// allowed on a replica set member or mongos", 79
	// UnknownReplWriteConcern, 100 UnsatisfiableWriteConcern). The whole
	// call fails at once: no backoff, no dead-lettering, documents are not
	// marked invalid.
	Configuration
)

// String returns the class's name as used in reports, spans and metrics:
// unknown, transient, throttled, invalid, conflict or configuration.
func (c Class) String() string {
	switch c {
	case Unknown:
		return "unknown"
	case Transient:
		return "transient"
	case Throttled:
		return "throttled"
	case Invalid:
		return "invalid"
	case Conflict:
		return "conflict"
	case Configuration:
		return "configuration"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Retryable reports whether failures of this class are re-sent (Transient
// and Throttled).
func (c Class) Retryable() bool { return c == Transient || c == Throttled }
