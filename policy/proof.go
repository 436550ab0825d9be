package policy

import (
	"strconv"
	"strings"
)

// Proof is what a failed reply proves about one document or write model of
// the command it answered. A disposition may claim only what the proofs of
// its attempts support: a document is called written only on Applied, and
// not stored only on NotApplied or NotSent.
type Proof uint8

const (
	// NotApplied: the server received the document and did not apply it
	// (a per-document write error, a command rejected before it ran, the
	// label NoWritesPerformed, the tail of an ordered write after its first
	// write error).
	NotApplied Proof = iota
	// Applied: the server acknowledged the write of this document (it has
	// no write error of its own and no write concern error came with it).
	Applied
	// AppliedUnconfirmed: applied on the primary, but the write concern was
	// not satisfied (writeConcernError): it may still be rolled back.
	AppliedUnconfirmed
	// MaybeApplied: the reply cannot say (a lost reply, a timeout after
	// sending, an interrupted command that may have committed the start of
	// its batch, an unacknowledged write).
	MaybeApplied
	// NotSent: the document never left the client on this attempt (a
	// context done before sending, a server selection or connection
	// checkout failure, a cleared connection pool, a client-side error).
	NotSent
)

// String returns the proof's name: not_applied, applied,
// applied_unconfirmed, maybe_applied or not_sent.
func (p Proof) String() string {
	switch p {
	case NotApplied:
		return "not_applied"
	case Applied:
		return "applied"
	case AppliedUnconfirmed:
		return "applied_unconfirmed"
	case MaybeApplied:
		return "maybe_applied"
	case NotSent:
		return "not_sent"
	}
	return "proof(" + strconv.Itoa(int(p)) + ")"
}

// Shape is the shape of a failure as Extract reads it from the driver's
// error: which part of the reply (or of the client) it came from. The shape
// alone decides what the failure proves (see ReplyShapes); the class
// decides what is done about it.
type Shape uint8

// The reply shapes, one row each in ReplyShapes.
const (
	// ShapeWriteError is one entry of writeErrors (ok: 1 reply).
	ShapeWriteError Shape = iota
	// ShapeWriteConcernError is the reply's writeConcernError.
	ShapeWriteConcernError
	// ShapeInterrupted is a whole-command ok: 0 whose code is in the
	// server's Interruption, NotPrimaryError or ShutdownError category
	// (InterruptedCodes).
	ShapeInterrupted
	// ShapeConfiguration is a whole-command ok: 0 that names a deployment
	// or client setting (DefaultConfigurationCodes, a code-2 or 301
	// "retryable writes are not supported" reply).
	ShapeConfiguration
	// ShapeAuthorization is a whole-command ok: 0 for a missing privilege
	// or a failed authentication (AuthorizationCodes).
	ShapeAuthorization
	// ShapeCommandRejected is a whole-command ok: 0 whose code's source
	// shows a refusal before the command ran (RejectedCodes).
	ShapeCommandRejected
	// ShapeNoWritesPerformed is any error labelled NoWritesPerformed.
	ShapeNoWritesPerformed
	// ShapeNetworkInFlight is a network error on a connection the command
	// was written to (driver label NetworkError): the reply was lost.
	ShapeNetworkInFlight
	// ShapeTimeoutInFlight is a client-side timeout or cancellation after
	// the command was sent (the driver labels it NetworkError).
	ShapeTimeoutInFlight
	// ShapeCheckout is a failure to get a connection: the pool was cleared
	// (the driver's retryable pool error), the checkout timed out
	// (WaitQueueTimeoutError), or the connection handshake failed.
	ShapeCheckout
	// ShapeServerSelection is a server selection failure: no server was
	// chosen, whatever ended the selection.
	ShapeServerSelection
	// ShapeTimeoutBeforeSend is a deadline too close to send the command
	// (the driver's ErrDeadlineWouldBeExceeded) or a deadline passed before
	// the command was sent.
	ShapeTimeoutBeforeSend
	// ShapeContextBeforeSend is a context cancelled before the command was
	// sent.
	ShapeContextBeforeSend
	// ShapeUnacknowledged is a write sent with w: 0: the server answers
	// nothing.
	ShapeUnacknowledged
	// ShapeClient is a client-side error before sending: a marshal error,
	// a nil document, a document over the maximum size, an invalid
	// argument.
	ShapeClient
	// ShapeUnrecognized is an error of no shape the driver produces (a
	// custom Target's own error, say): nothing says whether it was sent.
	ShapeUnrecognized
	// ShapeWriteErrorUnproven is one entry of writeErrors whose code is
	// not a verdict on its statement (WriteErrorShape): an
	// interruption, a network failure or "Write results unavailable" that
	// mongos reports on every statement it had sent to a shard.
	ShapeWriteErrorUnproven
	// ShapeWriteErrorNoStatement is a write error whose index names no
	// statement of the command it answered: it cannot be attributed, and
	// proves nothing about any document. Extract cannot see it (it does not
	// know the command); the write loop gives a failure this shape.
	ShapeWriteErrorNoStatement
	// ShapeCommandUnproven is a whole-command ok: 0 whose code no source
	// shows refused before the command ran (not in RejectedCodes, nor an
	// interruption, configuration or authorization code): 217
	// IncompleteTransactionHistory, the network-class codes mongos
	// reports for a shard reply it lost, an unknown code. Maybe applied.
	ShapeCommandUnproven
	// ShapeWriteErrorMulti is a write error on a statement that can touch
	// several documents (updateMany, deleteMany: multi: true): the
	// statement may have changed documents before the one refused. Like
	// ShapeWriteErrorNoStatement, Extract cannot see it (it does not know
	// the statement); the write loop gives a failure this shape.
	ShapeWriteErrorMulti
	shapeCount
)

// ReplyShape is one row of ReplyShapes: what a failure of that shape proves
// about each document of the command, and where the rule comes from.
type ReplyShape struct {
	// Shape is the row's shape.
	Shape Shape
	// Name is the shape's name as shown in reports and spans.
	Name string
	// Failed is what the reply proves about a document the failure names:
	// the document of a write error, or every document of the command for
	// a whole-command failure.
	Failed Proof
	// Others is what it proves about the documents of the same command
	// that have no failure of their own (unordered writes, and the
	// documents before the first write error of an ordered write). For
	// whole-command shapes it equals Failed.
	Others Proof
	// Tail is what it proves about the statements after it in an ordered
	// command (the server stops there): NotApplied after a verdict, and
	// what Failed says for the shapes that prove nothing. For
	// whole-command shapes it equals Failed.
	Tail Proof
	// Source names the specification, server code or driver behaviour the
	// row follows.
	Source string
	// Hidden is what the failure proves about every document of the
	// command when an earlier attempt of the same driver call may have
	// been sent: the driver retries a retryable write inside one call
	// (retryable-writes spec; with a deadline or a client Timeout, until
	// the time runs out) and its error describes its last attempt only.
	// It equals Failed for every row whose proof holds whatever an
	// earlier attempt did, and is MaybeApplied for the rows that say
	// "not sent" or "nothing written" of the last attempt alone.
	Hidden Proof
	// HiddenSource names the driver lines that return this shape after
	// an earlier attempt (mongo-go-driver v2.10.0
	// x/mongo/driver/operation.go), or why none can.
	HiddenSource string
}

// ReplyShapes returns the table of what each failure shape proves, one row
// per Shape in Shape order (a copy: the table itself cannot be changed).
// Failure.Proof looks the proof up in it; the write loop reads every proof
// from it (Failed, Others and Tail), none is written anywhere else.
func ReplyShapes() []ReplyShape {
	out := make([]ReplyShape, shapeCount)
	for s := range out {
		out[s] = Shape(s).Row()
	}
	return out
}

// Row returns the shape's row of ReplyShapes.
func (s Shape) Row() ReplyShape {
	if s < shapeCount {
		t := replyShapes[s]
		r := ReplyShape{Shape: t.Shape, Name: t.Name, Failed: t.Failed, Others: t.Others, Tail: t.Tail, Source: t.Source, Hidden: t.Failed, HiddenSource: hiddenSame}
		if h, ok := hiddenRows[s]; ok {
			r.Hidden, r.HiddenSource = h.proof, h.source
		}
		return r
	}
	return ReplyShape{Shape: s, Name: "shape(" + strconv.Itoa(int(s)) + ")", Failed: MaybeApplied, Others: MaybeApplied, Tail: MaybeApplied, Hidden: MaybeApplied}
}

// ProofAfter returns what f proves about the document it names when
// hidden says an earlier attempt of the same driver call may have been
// sent (its row's Hidden), or Proof() otherwise.
func (f *Failure) ProofAfter(hidden bool) Proof {
	if hidden {
		return f.Shape.Row().Hidden
	}
	return f.Proof()
}

const hiddenSame = "a reply of the last attempt proves the same after any earlier one: the server answered this attempt, and a retried statement that an earlier attempt ran is answered from the session's history (retryable-writes spec), not run again"

type hiddenRow struct {
	proof  Proof
	source string
}

// hiddenRows are the rows whose proof describes the driver's last attempt
// only: v2.10.0 returns them after an earlier attempt of the same call was
// sent (x/mongo/driver/operation.go, Operation.Execute).
var hiddenRows = map[Shape]hiddenRow{
	ShapeTimeoutBeforeSend: {MaybeApplied, "operation.go 747-750: calculateMaxTimeMS fails a retry whose deadline leaves no time and returns its own error; 818-822: ctx.Err() or ErrDeadlineWouldBeExceeded before a retry's roundTrip; 671-673: a retry starts by returning prevErr when that is a context error: the attempt before may have been applied"},
	ShapeContextBeforeSend: {MaybeApplied, "operation.go 818-819: ctx.Err() (cancelled) checked before a retry's roundTrip replaces the earlier attempt's error; 644-646: a cancelled overload backoff returns the current error"},
	ShapeCheckout:          {MaybeApplied, "operation.go 583-585 resetForRetry sets prevErr to a retry's pool-cleared checkout error (691-696), and 700-701 returns that prevErr when the next checkout fails: the pool error replaces an earlier attempt's lost reply"},
	ShapeNoWritesPerformed: {MaybeApplied, "operation.go 637-646: an overload backoff cut short by the deadline or the context returns the retry's own error, labelled NoWritesPerformed, bypassing the prevIndefiniteErr rule (898, 1032) that returns an earlier attempt's indefinite error"},
	ShapeServerSelection:   {NotSent, "operation.go 698-703: a retry whose server selection fails returns the previous attempt's error, never the selection error: a returned selection error is the first attempt's"},
	ShapeClient:            {NotSent, "client errors are raised while the driver builds the call's models, before its first attempt (mongo/bulk_write.go, mongo/collection.go)"},
}

// shapeRow is a row of replyShapes: ReplyShape without its Hidden proof
// (hiddenRows; Failed for the others).
type shapeRow struct {
	Shape                Shape
	Name                 string
	Failed, Others, Tail Proof
	Source               string
}

var replyShapes = [shapeCount]shapeRow{
	ShapeWriteErrorUnproven: {ShapeWriteErrorUnproven, "write_error_unproven", MaybeApplied, Applied, MaybeApplied,
		"mongos: a shard's batch that fails as a whole (lost reply, interruption, stepdown) becomes one write error per statement of that batch, one for an ordered batch, after the shard may have applied any of them (mongodb/mongo src/mongo/s/write_ops/batch_write_op.cpp noteBatchError; batch_write_exec.cpp \"Write results unavailable from <shard>\"): a write error whose code is no verdict on its statement proves nothing about it, nor about the rest of an ordered batch"},
	ShapeWriteErrorNoStatement: {ShapeWriteErrorNoStatement, "write_error_no_statement", MaybeApplied, MaybeApplied, MaybeApplied,
		"writeguard: a write error whose index names no statement of the command cannot be attributed to a document, so it proves nothing about any of them (a reply that does not fit its command)"},
	ShapeWriteError: {ShapeWriteError, "write_error", NotApplied, Applied, NotApplied,
		"server: a write error whose code is a verdict on its statement (WriteErrorShape: on mongod any code but NeverVerdictCodes, through mongos VerdictCodes and the caller's WithVerdictCodes) means the statement was not applied; the others of the batch were, and an ordered batch stops there (write_ops_exec.cpp performInserts; CRUD spec, BulkWriteException, the ordered option)"},
	ShapeWriteConcernError: {ShapeWriteConcernError, "write_concern_error", AppliedUnconfirmed, AppliedUnconfirmed, AppliedUnconfirmed,
		"read-write-concern spec: a writeConcernError is reported after the write was applied on the primary; it may still be rolled back"},
	ShapeInterrupted: {ShapeInterrupted, "interrupted", MaybeApplied, MaybeApplied, MaybeApplied,
		"server: an interruption or stepdown aborts a write command after it committed the start of its batch (write_ops_exec.cpp handleError rethrows Interruption and NotPrimaryError category codes, error_codes.yml)"},
	ShapeConfiguration: {ShapeConfiguration, "configuration", NotApplied, NotApplied, NotApplied,
		"server: the command is rejected before it runs (20 IllegalOperation for txnNumber on a standalone; Azure Cosmos DB code 2 and Amazon DocumentDB 301 'retryable writes are not supported')"},
	ShapeAuthorization: {ShapeAuthorization, "authorization", NotApplied, NotApplied, NotApplied,
		"server: authorization is checked before the command runs (13 Unauthorized: service_entry_point_common.cpp checkAuthorization before runCommandInvocation; 11 UserNotFound, 18 AuthenticationFailed: the connection's authentication, before any command)"},
	ShapeCommandRejected: {ShapeCommandRejected, "command_rejected", NotApplied, NotApplied, NotApplied,
		"server: the codes of RejectedCodes are raised before the command runs (each code's source in its doc: parsing, command lookup, namespace and view checks, ingress admission), or, for a command of one statement, after its write unit of work rolled back (find_and_modify.cpp)"},
	ShapeWriteErrorMulti: {ShapeWriteErrorMulti, "write_error_multi", MaybeApplied, Applied, NotApplied,
		"server: a multi: true update or delete writes each matched document in a write unit of work of its own, and handleError records the statement's error keeping what it already changed (write_ops_exec.cpp performUpdates/performDeletes, handleError): the statement may be partly applied, whatever the code; an ordered command stops after it"},
	ShapeCommandUnproven: {ShapeCommandUnproven, "command_unproven", MaybeApplied, MaybeApplied, MaybeApplied,
		"server: no source shows these codes raised before the command ran: 217 IncompleteTransactionHistory answers a retry whose earlier run may have been applied (transaction_participant.cpp _checkStatementExecuted; jstests/sharding/resharding_retryable_writes.js); mongos fails findAndModify as a whole with 6/89/9001 after the shard ran it (cluster_find_and_modify_cmd.cpp), on every deployment a network-class code is read so; an unknown code (FerretDB's SQLite busy error after part of a batch was stored) proves nothing"},
	ShapeNoWritesPerformed: {ShapeNoWritesPerformed, "no_writes_performed", NotApplied, NotApplied, NotApplied,
		"retryable-writes spec: the label NoWritesPerformed says the server wrote nothing (SERVER-66479)"},
	ShapeNetworkInFlight: {ShapeNetworkInFlight, "network_in_flight", MaybeApplied, MaybeApplied, MaybeApplied,
		"retryable-writes spec: a network error after the command was written may follow a successful write (driver label NetworkError)"},
	ShapeTimeoutInFlight: {ShapeTimeoutInFlight, "timeout_in_flight", MaybeApplied, MaybeApplied, MaybeApplied,
		"CSOT spec: a timeout while waiting for the reply closes the connection; the server may have applied the write"},
	ShapeCheckout: {ShapeCheckout, "checkout", NotSent, NotSent, NotSent,
		"CMAP spec: PoolClearedError and WaitQueueTimeoutError are raised before a connection is handed out (driver: RetryablePoolError, topology.WaitQueueTimeoutError, handshake ConnectionError)"},
	ShapeServerSelection: {ShapeServerSelection, "server_selection", NotSent, NotSent, NotSent,
		"server-selection spec: no server was selected, so nothing was sent"},
	ShapeTimeoutBeforeSend: {ShapeTimeoutBeforeSend, "timeout_before_send", NotSent, NotSent, NotSent,
		"CSOT spec: the driver refuses to send when the deadline leaves no time (driver.ErrDeadlineWouldBeExceeded)"},
	ShapeContextBeforeSend: {ShapeContextBeforeSend, "context_before_send", NotSent, NotSent, NotSent,
		"driver: a context cancelled before the command is written fails selection or checkout; nothing is sent"},
	ShapeUnacknowledged: {ShapeUnacknowledged, "unacknowledged", MaybeApplied, MaybeApplied, MaybeApplied,
		"write-concern spec: with w: 0 the server sends no reply about the write"},
	ShapeClient: {ShapeClient, "client", NotSent, NotSent, NotSent,
		"driver: marshal, size and argument errors are raised before the command is built (mongo.MarshalError, mongo.InvalidArgumentError, mongo.ErrClientDisconnected)"},
	ShapeUnrecognized: {ShapeUnrecognized, "unrecognized", MaybeApplied, MaybeApplied, MaybeApplied,
		"writeguard: an error that is none of the driver's shapes proves nothing about the server's state"},
}

// String returns the shape's name (its row's Name).
func (s Shape) String() string { return s.Row().Name }

// Proof returns what f proves about the document it names (or, for a
// whole-command failure, about every document of the command), from
// ReplyShapes.
func (f *Failure) Proof() Proof { return f.Shape.Row().Failed }

// InterruptedCodes are the whole-command codes after which part of a write
// command may have been applied: the server's Interruption category
// (Interrupted 11601, InterruptedAtShutdown 11600,
// InterruptedDueToReplStateChange 11602, ExceededTimeLimit 262,
// MaxTimeMSExpired 50, ClientDisconnect 279, LockTimeout 24), NotPrimaryError
// category (PrimarySteppedDown 189, NotWritablePrimary 10107,
// NotPrimaryNoSecondaryOk 13435, NotPrimaryOrSecondary 13436,
// LegacyNotPrimary 10058) and ShutdownError category (ShutdownInProgress
// 91). Source: mongodb/mongo src/mongo/base/error_codes.yml.
var InterruptedCodes = []int32{24, 50, 91, 189, 262, 279, 10058, 10107, 11600, 11601, 11602, 13435, 13436}

// verdictCodes are the write-error codes that prove their statement not
// applied wherever they come from, mongos included: the server refused
// that document or model for what it is, before writing it. A shard's
// own statement error reaches the client through mongos unchanged, so
// these stay verdicts there; mongos's copies of a shard's whole-batch
// failure (batch_write_op.cpp noteBatchError) carry the batch's code,
// never one of these unless the shard refused before running (20).
// Sources: mongodb/mongo src/mongo/base/error_codes.yml for the names;
// src/mongo/db/ops/write_ops_exec.cpp and the collection's insert and
// update paths raise them per statement:
//
//   - BadValue 2, TypeMismatch 14: the statement's own values;
//   - DocumentValidationFailure 121: the collection's validator refused
//     the document (db/catalog/document_validation);
//   - BSONObjectTooLarge 10334, 17419 (the document an update would
//     produce is over the limit): refused before it is written;
//   - 16755 ("Can't extract geo keys") and KeyTooLong 17280: an index
//     could not take the document's key;
//   - DuplicateKey 11000, 11001 (legacy) and 12582 (capped collection,
//     SERVER-7164): a unique index refused the document;
//   - 16500 (Azure Cosmos DB TooManyRequests, per statement): the request
//     was throttled and not performed (Azure Cosmos DB for MongoDB,
//     "Troubleshoot query and request-rate issues");
//   - IllegalOperation 20: refused before it ran ("Transaction numbers
//     are only allowed on a replica set member or mongos", PYTHON-2048);
//   - refusals raised before the statement writes: PathNotViable 28,
//     ShardKeyNotFound 61 (mongos cannot target an upsert without the
//     shard key, s/write_ops/batch_write_op.cpp targeting), ImmutableField
//     66 (update_driver / storage_validation), NoProgressMade 82, and
//     InvalidIdField 53 (FerretDB refuses a bad _id with it);
//   - StaleConfig 13388: the shard checks the routing version before it
//     runs the statement (s/collection_sharding_runtime.cpp,
//     OperationShardingState), and mongos passes the refusal on when its
//     own refreshes are spent; proved not applied, and retried
//     (DefaultTransientCodes).
//
// 16460 with " E11000 " (mongos wrapping a duplicate key, SERVER-11493)
// counts as 11000.
var verdictCodes = []int32{2, 14, 20, 28, 53, 61, 66, 82, 121, 10334, 11000, 11001, 12582, 13388, 16500, 16755, 17280, 17419}

// neverVerdictCodes are the write-error codes that never prove their
// statement not applied, on any deployment: the network-class codes
// (HostUnreachable 6, HostNotFound 7, NetworkTimeout 89,
// NetworkInterfaceExceededTimeLimit 202, SocketException 9001) and the
// Interruption, NotPrimaryError and ShutdownError categories
// (InterruptedCodes) that mongos copies onto every statement of a shard's
// batch it lost or that was interrupted after it may have applied some
// (batch_write_op.cpp noteBatchError; batch_write_exec.cpp "Write results
// unavailable from <shard>"), 83 (listed unproven since the third round),
// IncompleteTransactionHistory 217 (transaction_participant.cpp),
// InternalError 1 and UnknownError 8 (generic failures of a server's
// internals: mongod rolls their statement back, but FerretDB answers an
// SQLite "database is locked" with 1 after part of a batch was stored, as
// measured in issue 28), and
// InvalidOptions 72, which mongos puts on the copies of a batch whose
// statement moved a document's shard key, one of which the shard may have
// applied. WithVerdictCodes refuses them.
var neverVerdictCodes = []int32{1, 6, 7, 8, 24, 50, 72, 83, 89, 91, 189, 202, 217, 262, 279, 9001, 10058, 10107, 11600, 11601, 11602, 13435, 13436}

// VerdictCodes returns (a copy of) the write-error codes that prove their
// statement not applied on every deployment, mongos included (see
// verdictCodes for each code's source).
func VerdictCodes() []int32 { return append([]int32(nil), verdictCodes...) }

// NeverVerdictCodes returns (a copy of) the write-error codes that never
// prove their statement not applied: network, interruption, stepdown and
// shutdown codes, 217 and 72 (writeguard.WithVerdictCodes refuses them).
func NeverVerdictCodes() []int32 { return append([]int32(nil), neverVerdictCodes...) }

// WriteErrorShape returns the shape of a write error with code and msg on
// a statement that touches one document: ShapeWriteError (a verdict: not
// applied) or ShapeWriteErrorUnproven. mongod says that a mongod answered
// (a standalone or a replica set member, learned from the hello reply);
// extra are the caller's own verdict codes (writeguard.WithVerdictCodes).
//
//   - On mongod a write error proves its statement not applied: each
//     statement runs in a write unit of work that its error rolls back,
//     and handleError rethrows the codes that abort the batch instead of
//     recording them (write_ops_exec.cpp); any code but
//     NeverVerdictCodes is a verdict.
//   - Through mongos, or where the deployment is not known, only
//     VerdictCodes and extra are.
//
// These rest on mongod's and mongos's source; on FerretDB, Azure Cosmos DB
// and Amazon DocumentDB (which answer as a mongod) they are assumptions.
// Extract calls it with mongod false (it does not know the deployment);
// the write loop reads each write error again with the deployment.
func WriteErrorShape(code int32, msg string, mongod bool, extra []int32) Shape {
	switch {
	case inCodes(verdictCodes, code), code == 16460 && strings.Contains(msg, " E11000 "):
		return ShapeWriteError
	case inCodes(neverVerdictCodes, code):
		return ShapeWriteErrorUnproven
	case mongod, inCodes(extra, code):
		return ShapeWriteError
	}
	return ShapeWriteErrorUnproven
}

// AuthorizationCodes are the whole-command codes of a missing privilege or
// a failed authentication: UserNotFound 11, Unauthorized 13,
// AuthenticationFailed 18. Atlas's proxy error 8000 (AtlasError) is not
// one: Atlas gives it for many reasons (a privilege, a quota, a limit) and
// no public source says when it is raised, so it is ShapeCommandUnproven.
var AuthorizationCodes = []int32{11, 13, 18}

// rejectedCodes are the whole-command codes whose source shows the write
// command refused before it ran (ShapeCommandRejected: not applied).
// Sources, mongodb/mongo src/mongo (error_codes.yml for the names):
//
//   - BadValue 2, FailedToParse 9, TypeMismatch 14, InvalidOptions 72,
//     InvalidNamespace 73, IDLFailedToParse 40414, IDLUnknownField 40415:
//     the command is parsed (db/commands.cpp parse, the IDL parsers of
//     db/ops/write_ops.idl) before it runs;
//   - CommandNotFound 59, CommandNotSupported 115: command lookup
//     (db/service_entry_point_common.cpp) precedes execution;
//   - ReadConcernMajorityNotAvailableYet 134,
//     OperationNotSupportedInTransaction 263, CommandNotSupportedOnView
//     166: refused while the command's context or collection is set up,
//     before any write;
//   - the SystemOverloadedError category, AdmissionQueueOverflow 433,
//     RateLimitExceeded 449, PooledConnectionAcquisitionRejected 450,
//     IngressRequestRateLimitExceeded 462 (error_codes.yml; admission
//     control refuses the request before it runs, client-backpressure
//     spec), and Azure Cosmos DB's 16500 (TooManyRequests: "the request
//     was not performed");
//   - WriteConflict 112 as a whole-command error: write_ops_exec.cpp
//     handleError rethrows it only inside a multi-document transaction,
//     which it aborts (TransientTransactionError: nothing of the
//     transaction commits); outside one it is a statement's write error
//     or retried by the server (writeConflictRetry);
//   - NoSuchTransaction 251: the session's transaction is checked
//     before the command runs (transaction_participant.cpp
//     beginOrContinue);
//   - StaleConfig 13388: the shard's routing version check precedes the
//     command (see verdictCodes);
//   - DocumentValidationFailure 121, BSONObjectTooLarge 10334,
//     DuplicateKey 11000, 11001, 12582, 16755, KeyTooLong 17280: a
//     command of one statement (findAndModify) that fails as a whole
//     raises its statement's error after the statement's write unit of
//     work rolled back (db/commands/find_and_modify.cpp, "Plan executor
//     error during findAndModify"); a command of several statements
//     reports these as write errors.
//
// Every other whole-command code is ShapeCommandUnproven, unless it is an
// interruption (InterruptedCodes), a configuration or an authorization
// code. These rest on mongod's and mongos's source; on FerretDB, Azure
// Cosmos DB and Amazon DocumentDB they are assumptions.
var rejectedCodes = []int32{2, 9, 14, 59, 72, 73, 112, 115, 121, 134, 166, 251, 263, 433, 449, 450, 462, 10334, 11000, 11001, 12582, 13388, 16500, 16755, 17280, 40414, 40415}

func inCodes(list []int32, code int32) bool {
	for _, c := range list {
		if c == code {
			return true
		}
	}
	return false
}

// RejectedCodes returns (a copy of) the whole-command codes whose source
// shows the write command refused before it ran (ShapeCommandRejected);
// each code's source is in the package source beside the list. A copy:
// the list cannot be changed process-wide.
func RejectedCodes() []int32 { return append([]int32(nil), rejectedCodes...) }
