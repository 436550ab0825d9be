package policy

import (
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// WholeCommand is the Failure.Index of a failure that belongs to the whole
// command rather than to one document or write model: a top-level error
// (ok: 0), a write concern error, a network error or a timeout.
const WholeCommand = -1

// MaxBSONSize is the largest document a MongoDB server accepts and
// stores, 16 MiB (maxBsonObjectSize in the hello reply; a larger document
// fails with 10334 BSONObjectTooLarge). The one home of this limit:
// envelope.MaxBSONSize is this constant.
const MaxBSONSize = 16 * 1024 * 1024

// Origin says where a Failure came from. It is read from the shape of the
// driver's error, never from its message text.
type Origin uint8

const (
	// OriginServer is an error the server returned: a top-level error
	// (ok: 0, mongo.CommandError) or a per-document write error
	// (writeErrors[i]).
	OriginServer Origin = iota
	// OriginWriteConcern is a writeConcernError: the write was applied on
	// the primary but the requested write concern was not satisfied
	// (read-write-concern spec).
	OriginWriteConcern
	// OriginNetwork is a network error (driver label "NetworkError"): the
	// request may or may not have reached the server.
	OriginNetwork
	// OriginTimeout is a client-side or server-side timeout
	// (mongo.IsTimeout: context deadline, MaxTimeMSExpired 50, socket
	// timeouts).
	OriginTimeout
	// OriginContext is a cancelled context (context.Canceled).
	OriginContext
	// OriginClient is an error raised by the client before anything was
	// sent: a marshal error, a nil document, a document over the server's
	// maximum size (16 MiB, BSONObjectTooLarge), an invalid argument.
	OriginClient
)

// String returns the origin's name: server, write_concern, network,
// timeout, context or client.
func (o Origin) String() string {
	switch o {
	case OriginServer:
		return "server"
	case OriginWriteConcern:
		return "write_concern"
	case OriginNetwork:
		return "network"
	case OriginTimeout:
		return "timeout"
	case OriginContext:
		return "context"
	case OriginClient:
		return "client"
	}
	return "origin(" + strconv.Itoa(int(o)) + ")"
}

// Well-known error labels. Labels sit on the command-level error (top-level
// errorLabels, merged with writeConcernError.errorLabels by the driver),
// never on individual write errors.
const (
	// LabelRetryableWriteError marks an error after which the write may be
	// retried (retryable-writes spec).
	LabelRetryableWriteError = "RetryableWriteError"
	// LabelSystemOverloaded marks a server overload rejection
	// (client-backpressure spec).
	LabelSystemOverloaded = "SystemOverloadedError"
	// LabelRetryable marks a command that is safe to retry whatever its
	// type (client-backpressure spec).
	LabelRetryable = "RetryableError"
	// LabelNoWritesPerformed says the server wrote nothing during the
	// command (retryable-writes spec, SERVER-66479).
	LabelNoWritesPerformed = "NoWritesPerformed"
	// LabelTransientTransaction asks the caller to retry the whole
	// transaction (transactions spec).
	LabelTransientTransaction = "TransientTransactionError"
	// LabelNetworkError is added by the driver to network errors.
	LabelNetworkError = "NetworkError"
)

// Failure is one failed unit of a write: a document or write model (Index
// ≥ 0, its position in the batch that was sent) or the whole command (Index
// == WholeCommand). It carries everything the server said, so that nothing
// of the error is lost on the way to a classifier, a dead-letter envelope or
// the caller.
type Failure struct {
	// Index is the position of the failed document or model in the batch
	// as sent to the driver, or WholeCommand.
	Index int
	// Origin says where the failure came from.
	Origin Origin
	// Code is the server error code (0 when the error has none, e.g. a
	// network error).
	Code int32
	// CodeName is the server's codeName, when sent ("" otherwise).
	CodeName string
	// Message is the server's errmsg, or the client error's text.
	Message string
	// Labels are the error labels of the command-level error. Per-document
	// write errors have none.
	Labels []string
	// ErrInfo is the errInfo document (121 DocumentValidationFailure
	// details, write concern errInfo), or nil.
	ErrInfo bson.Raw
	// KeyPattern and KeyValue are the duplicate-key details of an 11000
	// error (servers 4.2+); nil when the server did not send them.
	KeyPattern bson.Raw
	KeyValue   bson.Raw // the duplicated value, e.g. {email: "a@x"}
	// Shape is where in the reply (or the client) the failure came from;
	// it alone decides what the failure proves about the documents of the
	// command (Proof, ReplyShapes).
	Shape Shape
	// Ambiguous is true when the write may have been applied although it
	// failed: Proof() is MaybeApplied or AppliedUnconfirmed (a lost reply,
	// a timeout after sending, an interrupted command, a write concern
	// error). The label NoWritesPerformed clears it.
	Ambiguous bool
	// RetryAfter is the delay the server asked for before a retry: Cosmos
	// DB's "RetryAfterMs=" in errmsg, or the client-backpressure spec's
	// baseBackoffMS. Zero when the server gave none.
	RetryAfter time.Duration
	// Raw is the server's original error document (the write error, the
	// write concern error or the whole reply), or nil.
	Raw bson.Raw
	// Err is the driver error this failure was extracted from.
	Err error
}

// HasLabel reports whether the failure carries the error label l. It does
// not allocate.
func (f *Failure) HasLabel(l string) bool {
	for _, have := range f.Labels {
		if have == l {
			return true
		}
	}
	return false
}
