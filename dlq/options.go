package dlq

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/envelope"
)

// DefaultUpsertRetries is how many more times MongoSink.Put sends the
// envelopes that lost a race on the unique fingerprint index (11000): the
// upserts that failed, or, WithInsertFirst, the envelopes deleted between
// their failed insert and their recapture update.
const DefaultUpsertRetries = 3

// SinkOption configures a MongoSink (NewMongoSink) or a FileSink
// (NewFileSink). Options are applied in order, then checked together: a
// nil option or a bad value is an error naming it (all of them joined).
type SinkOption interface {
	apply(*sinkConfig)
}

type sinkOptionFunc func(*sinkConfig)

func (f sinkOptionFunc) apply(c *sinkConfig) { f(c) }

type sinkConfig struct {
	// protection is what the sinks hand to envelope.Protect: WithRedact,
	// WithRedactErrInfo, WithFingerprintKey, WithEncryptedPaths,
	// WithPlaintextEncryptedFields.
	protection    envelope.Protection
	upsertRetries int
	insertFirst   bool
	setup         []SetupOption
	logger        *slog.Logger
	// indexCheckInterval: WithIndexCheckInterval.
	indexCheckInterval time.Duration
	errs               []error
}

// newSinkConfig applies opts; c.err() reports what was wrong with them.
func newSinkConfig(opts []SinkOption) sinkConfig {
	c := sinkConfig{upsertRetries: DefaultUpsertRetries, indexCheckInterval: DefaultIndexCheckInterval}
	for i, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("dlq: sink option %d is nil", i))
			continue
		}
		o.apply(&c)
	}
	return c
}

func (c *sinkConfig) err() error { return errors.Join(c.errs...) }

// WithRedact sets a hook that rewrites each envelope's original before it
// is stored, e.g. to drop an ssn field. It receives the original (a valid
// BSON document; it must not modify the bytes) and returns the document to
// store, which must be valid BSON: a Put whose hook returns invalid BSON
// fails rather than store the unredacted document. Returning nil stores an
// empty document.
//
// An envelope whose original the hook changed gets a fingerprint that
// lets no reader confirm a guess of the removed values:
// envelope.SchemeKeyed with WithFingerprintKey, else envelope.SchemeStored
// (see their cost to dedupe). It is stored with original_redacted: true,
// and a replay skips it unless told otherwise
// (its original is no longer the rejected payload).
//
// The hook does not touch err_info, whose consideredValue fields can hold
// the same values: see WithRedactErrInfo.
func WithRedact(f func(original bson.Raw) bson.Raw) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.protection.Redact = f })
}

// WithRedactErrInfo sets a hook that rewrites each envelope's errInfo
// before it is stored (the server's errInfo repeats the offending values
// in consideredValue). Same rules as WithRedact; failing_keywords and
// failing_paths, computed from the full errInfo, are kept.
func WithRedactErrInfo(f func(errInfo bson.Raw) bson.Raw) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.protection.RedactErrInfo = f })
}

// WithUpsertRetries sets how many more times MongoSink.Put sends the
// envelopes that lost a race on the fingerprint index
// (DefaultUpsertRetries by default; 0: return the error at once; negative:
// an error). Ignored by FileSink.
func WithUpsertRetries(n int) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		if n < 0 {
			c.errs = append(c.errs, fmt.Errorf("dlq: WithUpsertRetries(%d): want ≥ 0", n))
			return
		}
		c.upsertRetries = n
	})
}

// WithInsertFirst makes MongoSink.Put insert new envelopes and update
// recaptured ones in bulk instead of sending one upsert per envelope: the
// same result, much faster on servers that scan the collection for every
// upsert (FerretDB v1; see MongoSink). Ignored by FileSink.
func WithInsertFirst() SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.insertFirst = true })
}

// minFingerprintKey is the shortest key WithFingerprintKey takes (the
// HMAC-SHA256 key length RFC 2104 section 3 recommends: the output size).
const minFingerprintKey = 32

// WithFingerprintKey sets the key of the envelope.SchemeKeyed fingerprint of the
// envelopes with withheld or redacted fields (at least 32 bytes; shorter
// is an error). Without it they get envelope.SchemeStored. The sink keeps its own
// copy of key.
func WithFingerprintKey(key []byte) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		if len(key) < minFingerprintKey {
			c.errs = append(c.errs, fmt.Errorf("dlq: WithFingerprintKey: %d bytes; want at least %d", len(key), minFingerprintKey))
			return
		}
		c.protection.FingerprintKey = append([]byte(nil), key...)
	})
}

// WithEncryptedPaths names, for the target namespace ("db.coll"), the
// dotted paths that the collection's schema marks encrypt (see
// envelope.EncryptPaths): they are withheld from every envelope of that namespace
// even when errInfo does not name them (servers before 5.0 send no
// errInfo; a large errInfo is cut by the server). Options for several
// namespaces add up.
func WithEncryptedPaths(namespace string, paths ...string) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		if namespace == "" || slices.Contains(paths, "") {
			c.errs = append(c.errs, fmt.Errorf("dlq: WithEncryptedPaths(%q, %q): empty namespace or path", namespace, paths))
			return
		}
		if c.protection.EncryptedPaths == nil {
			c.protection.EncryptedPaths = map[string][]string{}
		}
		c.protection.EncryptedPaths[namespace] = append(c.protection.EncryptedPaths[namespace], paths...)
	})
}

// WithPlaintextEncryptedFields turns withholding off: the fields the
// server refused for not being encrypted are stored in plaintext like the
// rest of the original. Only for a dead-letter collection that is itself
// protected as the target is.
func WithPlaintextEncryptedFields() SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.protection.Plaintext = true })
}

// WithSetup sets the options (WithTTL, WithoutValidator, ...) with which
// MongoSink re-establishes the dead-letter collection and its indexes when
// it finds its unique fingerprint index gone (see MongoSink, "Lost
// indexes"). Default: EnsureCollection's defaults. Give the options the
// collection was set up with. Ignored by FileSink.
func WithSetup(opts ...SetupOption) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		for i, o := range opts {
			if o == nil {
				c.errs = append(c.errs, fmt.Errorf("dlq: WithSetup: option %d is nil", i))
				return
			}
		}
		c.setup = append([]SetupOption(nil), opts...)
	})
}

// WithLogger sets the logger MongoSink tells, at level Warn, that it
// found the dead-letter collection's unique fingerprint index gone and
// what re-establishing it did (the SetupReport), or why it refuses to
// store. Default: no logging (Put's error and Reestablished still say
// so). A nil logger means no logging, as everywhere in the module.
// Ignored by FileSink.
func WithLogger(l *slog.Logger) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) { c.logger = l })
}

// DefaultIndexCheckInterval is WithIndexCheckInterval's default.
const DefaultIndexCheckInterval = 5 * time.Second

// WithIndexCheckInterval sets how often, at most, MongoSink lists the
// dead-letter collection's indexes to check that its unique fingerprint
// index is there (see MongoSink, "Lost indexes"): d ≥ 0, default
// DefaultIndexCheckInterval (5 s); 0 checks before every Put (one
// listIndexes round trip per Put). A Put checks when the last check
// that found the index is d old or more, and at once after a Put that
// failed (any error: the collection may be gone). The staleness is
// bounded so: a dropped collection or a replaced index is noticed by the
// first Put d after the last check, or by the Put after any error; the
// Puts in between write as if the index were there (a dropped
// collection comes back without it, so in that window a recapture in
// insert-first mode, or two racing first captures, can make a second
// envelope of one payload, which a replay meets by _id for inserts).
// A negative d is an error naming it. Ignored by FileSink.
func WithIndexCheckInterval(d time.Duration) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("dlq: WithIndexCheckInterval(%v): want ≥ 0", d))
			return
		}
		c.indexCheckInterval = d
	})
}
