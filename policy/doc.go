// Package policy holds writeguard's decisions, as pure functions and small
// values with no I/O: what went wrong (Failure, Extract), what a reply
// proves about each document (Shape, Proof, ReplyShapes), what it means
// (Class, Classifier, the default Table), how long to wait before trying
// again (Backoff) and how many retries the whole process may spend
// (Budget), and what the caller reads (Disposition, IsDuplicateKey,
// MaxBSONSize): what users read or extend. The rules only the write loop
// uses (routing, giving up, read-back decisions, attempt limits) are in
// writeguard's internal/engine.
//
// policy imports nothing of the project (.ci/run checks it), so a
// classifier or a backoff schedule can be tested without a server.
//
// Classification is by error code and error label, never by Go type alone;
// message text is read only where a server gives no other sign (Azure
// Cosmos DB's and Amazon DocumentDB's "retryable writes are not
// supported", mongos's 16460 wrapping an E11000, Cosmos DB's
// RetryAfterMs). The default table (Default) follows the
// retryable-writes spec, the client-backpressure spec and
// mongodb/mongo src/mongo/base/error_codes.yml; its code sets are exported
// so users extend them rather than copy them.
package policy
