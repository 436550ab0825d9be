// Package faultproxy is the test bed for writeguard's write guarding: a
// MongoDB wire-protocol (OP_MSG) TCP proxy that sits between the Go driver
// and a MongoDB-compatible server, injects scripted faults, emulates
// $jsonSchema collection validators with the server's exact errInfo, and
// counts what passes through. With no server configured it answers every
// command itself (the null backend), so tests and overhead benchmarks run
// with no MongoDB at all.
//
// # Use
//
//	script := faultproxy.MustScript(
//		faultproxy.Validator("app.users", bson.D{{"$jsonSchema", schema}}),
//		faultproxy.On("insert").In("app.users").Nth(2).Do(faultproxy.CloseAfterForward()),
//		faultproxy.On("insert").In("app.dlq").Always().Do(faultproxy.ErrorReply(faultproxy.CommandError{
//			Code: 91, CodeName: "ShutdownInProgress", Labels: []string{"RetryableWriteError"},
//		})),
//	)
//	p, _ := faultproxy.New(faultproxy.WithScript(script), faultproxy.WithReplicaSet("rs0"))
//	_ = p.Start(ctx)
//	defer p.Close()
//	client, _ := mongo.Connect(options.Client().ApplyURI(p.URI()))
//
// # Upstream
//
// WithUpstream("host:port") forwards to a real mongod (or an embedded
// FerretDB). Each client connection gets its own upstream connection, so
// cursors, sessions and exhaust streams keep working; messages the proxy
// does not need to change are relayed byte for byte, including OP_QUERY
// handshakes, OP_COMPRESSED and anything it cannot parse. Without an
// upstream the null backend answers hello/isMaster as a standalone (or, with
// WithReplicaSet, as a replica-set primary with logicalSessionTimeoutMinutes
// 30, so the driver uses retryable writes), ping, buildInfo, endSessions,
// insert/update/delete (every statement applied), findAndModify, find and
// aggregate (empty cursors) and anything else with {ok: 1}. It stores
// nothing.
//
// # Replica set
//
// WithReplicaSet("rs0") together with WithUpstream presents a standalone
// upstream (the embedded FerretDB) to the driver as the primary of a
// one-member replica set: hello is rewritten (setName, hosts,
// isWritablePrimary, logicalSessionTimeoutMinutes, topologyVersion, with
// the streaming protocol), and the proxy does the server's retryable-write
// bookkeeping: a write carrying lsid and txnNumber is executed once, a
// retry with the same txnNumber runs only the statements not yet executed
// and is answered from the record for the others. Transactions are
// refused with 20 IllegalOperation. See WithReplicaSet.
//
// # Sharded cluster
//
// WithSharded presents the proxy as a mongos in front of a hashed-sharded
// collection whose virtual shards all live in the one upstream (or the null
// backend): hello says msg "isdbgrid", and each insert, update or delete
// is split into child batches by shard key, forwarded part by part, and
// answered with one merged reply as mongos builds it (write errors and
// upserted indexes in the client's numbering, n summed; ordered writes go
// shard by shard and stop at the first failing child batch). FailShard
// fails one child batch after its shard applied part of it, reported as
// mongos reports a lost shard reply: a write error per statement of that
// batch ("Write results unavailable from <shard> :: caused by :: ..."),
// one for an ordered write. Stats.Shards and Stats.ChildBatches count what
// each shard got; ShardOf says where a statement goes.
//
// # Limits
//
// WithLimits announces small maxWriteBatchSize, maxMessageSizeBytes and
// maxBsonObjectSize in the handshake (any mode), so that the driver splits
// one call into several commands; maxWriteBatchSize is enforced as the
// server does, and find/getMore batches are capped to fit the message size.
//
// # Fail points
//
// The proxy answers configureFailPoint itself, with any backend, for the
// server's failCommand (modes times, skip, alwaysOn, off; data
// failCommands, errorCode, errorLabels, writeConcernError,
// closeConnection, blockConnection + blockTimeMS, appName) and
// onPrimaryTransactionalWrite (the write commits, then the connection
// closes), with the server's semantics: RetryableWriteError is added to a
// retryable code on a retryable write, a writeConcernError is added after
// the write ran. Stats counts them as FaultFailPoint. A Script's faults
// come after the fail points, as a second layer.
//
// # Scripts
//
// A Script holds Rules and Validators. A Rule selects commands by name
// (On("insert")), namespace (In("db.coll")) and an optional predicate
// (Where), counts them, and applies a Fault to the occurrences in its
// window (Nth, Times, Always): ErrorReply (an ok:0 reply, not forwarded,
// like failCommand), WriteConcernErrorReply (forwarded, then a
// writeConcernError is added), CloseBeforeForward and CloseAfterForward
// (network errors with the write not applied or applied), Delay,
// RejectDocuments (per-document write errors, e.g. 112 WriteConflict or
// Cosmos DB's 16500), ApplyThenError and ApplyThenClose (partial
// application: the first k statements are applied, then the client gets an
// ok: 0 error such as 11602 InterruptedDueToReplStateChange, or a dropped
// connection), Custom (any handler), RandomSchedule (a seeded,
// replayable choice among faults for chaos tests), and a RateLimiter's
// Fault (the server's ingress request rate limiter: commands above a rate
// are refused with 462 IngressRequestRateLimitExceeded, labelled
// SystemOverloadedError and RetryableError).
//
// A Validator emulates a collection's $jsonSchema validator for inserts:
// the documents it rejects get a code-121 write error whose errInfo is
// built like the server's (package jsonschema); the others are forwarded in
// a rewritten insert. Ordered inserts stop at the first rejected document;
// unordered ones forward every accepted document and report every rejected
// one. Write error indexes in the reply (the server's own, e.g. 11000, and
// the proxy's) are those of the client's command.
//
// # Hidden attempts
//
// NewHiddenAttempts(p) gives the faults of a write applied whose reply is
// lost, followed by the driver's own retry of it (same lsid and
// txnNumber), which meets a RetryFate: cut by the deadline before it is
// sent (with HoldUntilDeadline on the client's monitor), refused by a pool
// clear, answered 462 labelled NoWritesPerformed, or answered 217
// IncompleteTransactionHistory. Put its Retries rule first in the script
// and its ReplyLost faults anywhere. RefuseMultiAt writes a multi update's
// first k-1 documents and refuses the k-th; ShardKeyMove is a sharded child
// batch failed with 72 copies after its first statement was applied;
// ShardReplyLost is a write mongos fails as a whole (6, 89, 9001) after the
// shard ran it. See hidden.go and multi.go.
//
// # Counters
//
// Stats reports commands by name and namespace, statements received and
// forwarded per command name, and faults fired by kind, for amplification
// figures (how many round trips and documents a guarded write costs).
//
// Limits: compression (OP_COMPRESSED) is relayed untouched to an upstream
// but never parsed, so faults do not apply to compressed messages (the
// driver compresses only when asked to); OP_MSG checksums are verified and
// dropped from messages the proxy rewrites.
package faultproxy
