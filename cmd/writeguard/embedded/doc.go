// Package embedded runs a MongoDB-compatible server inside the current
// process, for writeguard's end-to-end tests and its demo, on machines with
// no MongoDB.
//
// The server is FerretDB v1.24.2 (github.com/FerretDB/FerretDB/ferretdb)
// with its SQLite backend, which is pure Go (modernc.org/sqlite; builds with
// CGO_ENABLED=0). It listens on 127.0.0.1 on a kernel-chosen port and keeps
// one SQLite file per database in a temporary directory, or in a directory
// given with [WithDataDir] so that data outlives the process (the demo's
// dead-letter collection, read later by "writeguard dlq --data-dir").
//
//	s, err := embedded.Start(ctx)
//	if err != nil { ... }
//	defer s.Close(ctx)
//	client, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
//	// ... disconnect the client before s.Close for a fast Close.
//
// # Cost
//
// Importing this package pulls FerretDB and every backend it links
// (PostgreSQL through pgx, MySQL, SAP HANA, SQLite, gRPC, mongo-driver v1),
// so the command's module graph is several times the library's and its
// binary is tens of megabytes. The figures are not repeated here, where
// they would go stale: the repository's README.md, section
// "Binary size", gives the module counts (the command's module graph, the modules
// compiled into the writeguard binary, those a program importing the
// writeguard package compiles, with and without otelhook) in a block that
// TestReadmeFigures (cmd/writeguard/readme_test.go) runs and compares on
// every test run, and the command that measures the binary for your Go
// version and platform (go build -o wg ./cmd/writeguard && ls -l wg).
// That is why it lives in the command's module: the library module
// (github.com/writeguard/writeguard) never imports it.
//
// # What it is not
//
// FerretDB v1 speaks the wire protocol and reports itself as a standalone
// MongoDB 7.0 (maxWireVersion 21), but much is missing or different. The
// tests in this package pin each item below, so an upgrade that changes one
// fails loudly.
//
// Rejected with NotImplemented (238), nothing created or changed:
//   - create with validator, validationLevel, validationAction,
//     expireAfterSeconds, timeseries, viewOn, collation. So there are no
//     schema validators and DocumentValidationFailure (121) never happens.
//   - createIndexes with expireAfterSeconds (TTL), partialFilterExpression,
//     hidden, collation.
//   - collMod.
//   - $group accumulators other than $sum and $count ($min, $max, $first,
//     $last, $avg, $push, $addToSet); the stages $facet, $lookup,
//     $sortByCount, $replaceRoot, $merge, $out and others; $unwind in its
//     document form ({path, preserveNullAndEmptyArrays}). Supported stages:
//     $match, $unwind "$path", $group, $sort, $skip, $limit, $count,
//     $project, $addFields/$set, $unset.
//
// Silently different from MongoDB:
//   - $group computes only its FIRST accumulator; every further one yields
//     0. Use one accumulator per $group (one aggregate per figure).
//   - $project and $addFields do not evaluate "$field" paths: the string
//     itself is stored. Only inclusion/exclusion and the $sum and $type
//     operators work.
//   - Duplicate key errors (11000, "E11000 duplicate key error collection:
//     db.coll") carry neither keyPattern nor keyValue, and the message names
//     neither the index nor the key.
//   - A unique index accepts any number of documents lacking the field or
//     holding null (MongoDB rejects the second). "sparse" is accepted and
//     ignored.
//   - The update command numbers upserted[].index by the count of upserts
//     so far instead of the position in updates, so the driver's
//     UpsertedIDs (UpdateResult, BulkWriteResult) can carry wrong model
//     indexes. The counts are right.
//   - Documents over 16 MiB are stored (MongoDB: BSONObjectTooLarge).
//   - A field name with a dot is a write error BadValue (2) (MongoDB 5.0+
//     stores it).
//   - A Decimal128 value panics the connection's handler, which FerretDB
//     recovers from by dropping the connection: the client sees a network
//     error; the server goes on.
//   - Transactions: the first command carrying startTransaction fails with
//     FailedToParse (9) (a standalone mongod answers IllegalOperation 20).
//     Sessions without a transaction work; lsid and txnNumber are ignored,
//     endSessions is CommandNotFound (59, which the driver ignores).
//   - An update reads the document, applies the operators in Go and writes
//     the whole document back, with nothing between the read and the
//     write: of two concurrent updates of one document, one is lost
//     although both are acknowledged (16 writers: 320 $inc acknowledged,
//     88 stored). mocks/faultproxy sends updates upstream one at a time,
//     so the e2e bed keeps MongoDB's per-document atomicity.
//   - Update with an aggregation pipeline fails with TypeMismatch (14); the
//     $jsonSchema query operator fails with BadValue (2).
//   - An unacknowledged write (w: 0, sent as an OP_MSG with the moreToCome
//     flag, which asks for no reply) is answered all the same. The Go
//     driver does not read that answer and does not check a reply's
//     responseTo, so a direct client's next command on that connection
//     reads the w: 0 command's reply instead of its own, and every later
//     reply there is one command late: a duplicate insert reads as
//     success (TestUnacknowledgedWriteReply). Write to it directly with
//     an acknowledged write concern only. Through mocks/faultproxy (the
//     e2e bed) a moreToCome request goes upstream without the flag and
//     its reply is dropped, so the connection stays in step.
//
// Same as MongoDB, checked by the tests: insert/find, unique and compound
// unique indexes, InsertMany ordered (stops at the first error) and
// unordered (goes on) with one BulkWriteException write error per failed
// document at its batch index, BulkWrite with mixed models, FindOneAndUpdate
// with upsert, $setOnInsert/$inc/$max, dates to the millisecond.
//
// # Speed
//
// Start takes under a millisecond and adds about 1 MiB of RSS; Close with
// no client connected takes a few milliseconds. InsertMany is fast (10,000
// small documents in batches of 500: ~0.3 s). Reads are not: secondary
// indexes only enforce uniqueness and are never used to find documents,
// and the _id index is not used either (FerretDB's SQL for an {_id: v}
// filter does not match the index expression; only a string or ObjectID
// _id is even filtered in SQLite rather than in Go). So every find, count
// (EstimatedDocumentCount too), update, upsert, delete and aggregate scans
// the whole collection, ~10 µs per document: about 0.4 s per {_id}
// lookup or upsert and 3 to 5 s per query or aggregate on 42,000
// documents, and $group holds every document of the collection in memory
// (~150 MiB for 42,000 small ones). Write in batches; avoid per-document
// upserts into large collections.
//
// The SQLite files use journal_mode(wal) and synchronous(normal): nothing
// is lost if the process dies; an OS crash may lose the last commits.
//
// # Retryable writes
//
// The hello reply has no setName, so the driver sees a standalone server
// and, whatever retryWrites says, neither retries writes nor sends
// txnNumber: there is no "Transaction numbers are only allowed on a replica
// set member or mongos" (20) error. [Server.URI] still says
// retryWrites=false, as is right for a standalone.
//
// # Tracing and logs
//
// FerretDB starts spans on the global OpenTelemetry TracerProvider
// (otel.Tracer("")) for every command it serves; a test that installs a
// global provider sees them alongside the client's. Its slog records are
// discarded unless [WithLogger] is given.
package embedded
