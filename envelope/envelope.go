package envelope

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// SchemaVersion is the version of the Envelope layout written by this
// package. It is stored in every envelope as schema_version.
const SchemaVersion = 1

// Status values of an Envelope.
const (
	// StatusPending: waiting for a replay or a discard.
	StatusPending = "pending"
	// StatusReplayed: written to its target collection by a replay.
	StatusReplayed = "replayed"
	// StatusDiscarded: given up by an operator.
	StatusDiscarded = "discarded"
)

// Envelope is one dead-lettered document or write model, as stored in the
// dead-letter collection. Field names (bson tags) are the stored names
// (the collection's validator, Validator, checks the core ones); they are
// part of the stored format and do not change within a SchemaVersion.
type Envelope struct {
	// SchemaVersion is the layout version (SchemaVersion).
	SchemaVersion int `bson:"schema_version" json:"schema_version"`
	// Fingerprint is the hex SHA-256 of the canonical original without a
	// writeguard-assigned _id (see Fingerprint). It is the dead-letter
	// collection's unique key: a recapture of the same payload upserts.
	Fingerprint string `bson:"fingerprint" json:"fingerprint"`
	// Original is the document (or write model) verbatim, as marshalled
	// for the write.
	Original bson.Raw `bson:"original" json:"-"`
	// OriginalTruncated is true when Original was cut to fit the 16 MiB
	// BSON limit together with the envelope's own fields (see MongoSink):
	// it then holds only the top-level fields that fit, and cannot be
	// replayed.
	OriginalTruncated bool `bson:"original_truncated,omitempty" json:"original_truncated,omitempty"`
	// OriginalSize is the size in bytes of the original before it was
	// truncated (set only when OriginalTruncated is true).
	OriginalSize int `bson:"original_size,omitempty" json:"original_size,omitempty"`
	// OriginalDropped names the top-level fields truncation left out, in
	// document order (at most 100 names; set only when OriginalTruncated
	// is true).
	OriginalDropped []string `bson:"original_dropped,omitempty" json:"original_dropped,omitempty"`
	// OriginalRedacted is true when a redaction hook (WithRedact) changed
	// Original before it was stored: the stored original is not the
	// payload that was rejected, and a replay skips it unless told
	// otherwise. Fingerprint is still that of the unredacted payload.
	OriginalRedacted bool `bson:"original_redacted,omitempty" json:"original_redacted,omitempty"`
	// DocumentID is the original's _id.
	DocumentID bson.RawValue `bson:"document_id" json:"-"`
	// IDAssigned is true when writeguard assigned DocumentID (the caller's
	// document had no _id).
	IDAssigned bool `bson:"id_assigned" json:"id_assigned"`
	// ErrInfo is the server's errInfo, verbatim (nil before MongoDB 5.0).
	ErrInfo bson.Raw `bson:"err_info,omitempty" json:"-"`
	// FailingKeywords are the leaf operators of ErrInfo (FailingKeywords);
	// ["unknown"] when ErrInfo names none.
	FailingKeywords []string `bson:"failing_keywords" json:"failing_keywords"`
	// FailingPaths are the dotted property paths ErrInfo names
	// (FailingPaths).
	FailingPaths []string `bson:"failing_paths" json:"failing_paths"`
	// Code, CodeName and ErrMsg are the server's error code, codeName and
	// errmsg (code 121 DocumentValidationFailure for schema failures).
	Code     int32  `bson:"code" json:"code"`
	CodeName string `bson:"code_name,omitempty" json:"code_name,omitempty"`
	ErrMsg   string `bson:"errmsg" json:"errmsg"`
	// Labels are the error labels of the command that failed, if any.
	Labels []string `bson:"labels,omitempty" json:"labels,omitempty"`
	// Namespace is "<database>.<collection>" of the write's target.
	Namespace string `bson:"namespace" json:"namespace"`
	// Operation is the wrapped call: insertOne, insertMany or bulkWrite.
	Operation string `bson:"operation" json:"operation"`
	// BatchIndex is the document's index in the caller's batch.
	BatchIndex int `bson:"batch_index" json:"batch_index"`
	// FirstSeen and LastSeen are when the payload was first and last
	// dead-lettered (BSON dates, UTC).
	FirstSeen time.Time `bson:"first_seen" json:"first_seen"`
	LastSeen  time.Time `bson:"last_seen" json:"last_seen"`
	// Attempts counts the captures of this payload (≥ 1).
	Attempts int `bson:"attempts" json:"attempts"`
	// Status is StatusPending, StatusReplayed or StatusDiscarded.
	Status string `bson:"status" json:"status"`
	// ReplayedAt is when a replay wrote the payload to its target (status
	// replayed); zero otherwise. Set by package replay.
	ReplayedAt time.Time `bson:"replayed_at,omitempty" json:"replayed_at,omitzero"`
	// ReplayRun is the id of the last replay run that tried the envelope
	// (package replay, WithRunID), whatever the outcome; the runners of
	// one run skip the envelopes it names. Empty before any replay.
	ReplayRun string `bson:"replay_run,omitempty" json:"replay_run,omitempty"`
	// ReplayTriedAt is when that run tried it; zero before any replay.
	ReplayTriedAt time.Time `bson:"replay_tried_at,omitempty" json:"replay_tried_at,omitzero"`
	// DiscardedAt is when Discard gave the envelope up (status discarded);
	// zero otherwise.
	DiscardedAt time.Time `bson:"discarded_at,omitempty" json:"discarded_at,omitzero"`
	// TraceID and SpanID identify the span of the write that dead-lettered
	// the payload, when there was one (hex, W3C trace context).
	TraceID string `bson:"trace_id,omitempty" json:"trace_id,omitempty"`
	SpanID  string `bson:"span_id,omitempty" json:"span_id,omitempty"`
}

// Sink receives dead-lettered envelopes.
//
// Put stores envs as one batch. It must be idempotent per Fingerprint: a
// guarded collection retries a failed Put with the same envelopes (and the
// same backoff as its writes), so a retried Put must not create a second
// record of a payload. Put returns nil only when every envelope is durably
// stored; any error means the caller treats the whole batch as not stored.
// Implementations must be safe for concurrent use.
type Sink interface {
	Put(ctx context.Context, envs []Envelope) error
}

// SinkFunc adapts a function to the Sink interface.
type SinkFunc func(ctx context.Context, envs []Envelope) error

// Put calls f(ctx, envs).
func (f SinkFunc) Put(ctx context.Context, envs []Envelope) error { return f(ctx, envs) }
