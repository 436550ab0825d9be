// Package dlq is writeguard's dead-letter collection: MongoSink stores
// envelopes (package envelope) in it, FileSink is the fallback file,
// EnsureCollection sets it up, Stats, Filter and Discard work its backlog.
package dlq
