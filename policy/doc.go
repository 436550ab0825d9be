// Package policy holds writeguard's decisions, as pure functions and small
// values with no I/O: what went wrong (Failure, Extract), what it means
// (Class, Classifier, the default Table), how long to wait before trying
// again (Backoff, Wait) and how many retries the whole process may spend
// (Budget).
//
// The root package runs the write path (prepare, attempt, Extract,
// Classify, route, report) and asks this package at each step. policy
// imports nothing of the project, so a classifier or a backoff schedule can
// be tested without a server.
//
// Classification is by error code and error label, never by Go type alone
// and never by message text. The default table (Default) follows the
// retryable-writes spec, the client-backpressure spec and
// mongodb/mongo src/mongo/base/error_codes.yml; its code sets are exported
// so users extend them rather than copy them.
package policy
