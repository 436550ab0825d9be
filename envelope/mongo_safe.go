package envelope

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

var _ PartialSink = (*MongoSink)(nil)

// WithSetup sets the options (WithTTL, WithoutValidator, ...) with which
// MongoSink re-establishes the dead-letter collection and its indexes when
// it finds its unique fingerprint index gone (see MongoSink, "Lost
// indexes"). Default: EnsureCollection's defaults. Give the options the
// collection was set up with. Ignored by FileSink.
func WithSetup(opts ...SetupOption) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		for i, o := range opts {
			if o == nil {
				c.errs = append(c.errs, fmt.Errorf("envelope: WithSetup: option %d is nil", i))
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
// so). A nil logger is an error. Ignored by FileSink.
func WithLogger(l *slog.Logger) SinkOption {
	return sinkOptionFunc(func(c *sinkConfig) {
		if l == nil {
			c.errs = append(c.errs, errors.New("envelope: WithLogger(nil)"))
			return
		}
		c.logger = l
	})
}

// ErrIndexMissing is wrapped by MongoSink.Put's error when the dead-letter
// collection's unique fingerprint index is gone and re-establishing it
// failed: the sink stores nothing rather than envelopes a later capture
// or replay could duplicate.
var ErrIndexMissing = errors.New("envelope: the dead-letter collection has no unique index on fingerprint")

// Reestablished returns how many times s found the unique fingerprint
// index (or the whole collection) gone and re-established it.
func (s *MongoSink) Reestablished() int64 { return s.reestablished.Load() }

// Server error codes the index check acts on (mongodb/mongo
// src/mongo/base/error_codes.yml): 26 NamespaceNotFound, listIndexes'
// answer for a collection that does not exist; 13 Unauthorized, for a
// user without the listIndexes action.
const (
	codeNamespaceNotFound = 26
	codeUnauthorized      = 13
)

// checkIndexes makes sure the unique fingerprint index is there, running
// EnsureCollection when it is not (see MongoSink, "Lost indexes").
func (s *MongoSink) checkIndexes(ctx context.Context) error {
	ok, err := s.hasFingerprintIndex(ctx)
	if err != nil && hasCode(err, codeUnauthorized) {
		// A role that may write the DLQ but not list its indexes: the
		// check cannot be made; storing goes on as before it existed.
		if s.uncheckable.CompareAndSwap(false, true) && s.cfg.logger != nil {
			s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "envelope: not allowed to list the dead-letter collection's indexes (13 Unauthorized): a lost unique fingerprint index will not be noticed; grant listIndexes",
				slog.String("namespace", s.coll.Database().Name()+"."+s.coll.Name()))
		}
		return nil
	}
	if err != nil || ok {
		return err
	}
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	if ok, err := s.hasFingerprintIndex(ctx); err != nil || ok {
		return err // re-established meanwhile by another Put
	}
	ns := s.coll.Database().Name() + "." + s.coll.Name()
	rep, err := EnsureCollection(ctx, s.coll.Database(), s.coll.Name(), s.cfg.setup...)
	st := rep.State(FeatureFingerprintIndex)
	if err == nil && st != FeatureApplied && st != FeatureAlready {
		err = fmt.Errorf("fingerprint index %s", st)
	}
	if err != nil {
		if s.cfg.logger != nil {
			s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "envelope: the dead-letter collection lost its unique fingerprint index and it could not be re-established; storing nothing",
				slog.String("namespace", ns), slog.String("error", err.Error()))
		}
		return fmt.Errorf("%w (%s), and re-establishing it failed; nothing stored: %w", ErrIndexMissing, ns, err)
	}
	s.reestablished.Add(1)
	if s.cfg.logger != nil {
		s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "envelope: the dead-letter collection had lost its unique fingerprint index (dropped?); re-established it before storing",
			slog.String("namespace", ns), slog.String("setup", rep.String()))
	}
	return nil
}

// hasFingerprintIndex lists the collection's indexes and reports whether
// the unique index on {fingerprint: 1} is among them (false, nil for a
// collection that does not exist).
func (s *MongoSink) hasFingerprintIndex(ctx context.Context) (bool, error) {
	// Through an acknowledged clone: under w: 0 the driver would not wait
	// for listIndexes' reply either (the write itself then reports
	// ErrUnacknowledgedSink).
	idx, err := listIndexes(ctx, s.coll.Clone(options.Collection().SetWriteConcern(writeconcern.W1())))
	if err != nil {
		if hasCode(err, codeNamespaceNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("envelope: checking the dead-letter collection's indexes: %w", err)
	}
	ex := findIndex(idx, []keyField{{"fingerprint", 1}})
	return ex != nil && ex.Unique, nil
}

// PutEach is Put reporting per envelope (see PartialSink): all nil when
// Put succeeds. When Put fails, the envelopes it may have stored in part
// (a refused statement among others, a lost reply) are read back by
// fingerprint with one find: entry i is nil when the collection holds a
// pending envelope of envs[i]'s fingerprint (this Put's, or a concurrent
// capture's of the same payload: either way the payload is kept for a
// replay), and Put's error otherwise. An envelope the redaction hooks
// make invalid fails alone. When nothing can have been stored (the
// sink's construction error, ErrIndexMissing, ErrUnacknowledgedSink, a
// done ctx) or the read-back fails, every entry is Put's error (joined
// with the read-back's).
func (s *MongoSink) PutEach(ctx context.Context, envs []Envelope) []error {
	out := make([]error, len(envs))
	fps := make([]string, len(envs))
	var good []Envelope
	for i := range envs {
		fp, err := s.storedFingerprint(envs[i])
		if err != nil {
			out[i] = err
			continue
		}
		fps[i] = fp
		good = append(good, envs[i])
	}
	err := s.Put(ctx, good)
	if err == nil {
		return out
	}
	fail := func(err error) []error {
		for i := range out {
			if out[i] == nil {
				out[i] = err
			}
		}
		return out
	}
	if s.err != nil || errors.Is(err, ErrIndexMissing) || errors.Is(err, ErrUnacknowledgedSink) || ctx.Err() != nil {
		return fail(err)
	}
	held, rerr := s.pendingFingerprints(ctx, fps)
	if rerr != nil {
		return fail(fmt.Errorf("%w (and reading back which envelopes are stored failed: %w)", err, rerr))
	}
	for i := range envs {
		if out[i] == nil && !held[fps[i]] {
			out[i] = err
		}
	}
	return out
}

// storedFingerprint returns the fingerprint Put stores env under (after
// the defaults and the redaction hooks), or why env cannot be stored.
func (s *MongoSink) storedFingerprint(env Envelope) (string, error) {
	merged := mergeByFingerprint([]Envelope{env})
	e, err := prepareForStore(merged[0], s.cfg)
	if err != nil {
		return "", err
	}
	return e.Fingerprint, nil
}

// pendingFingerprints returns which of fps the collection holds a
// pending envelope of.
func (s *MongoSink) pendingFingerprints(ctx context.Context, fps []string) (map[string]bool, error) {
	want := make(bson.A, 0, len(fps))
	for _, fp := range fps {
		if fp != "" {
			want = append(want, fp)
		}
	}
	held := make(map[string]bool, len(want))
	if len(want) == 0 {
		return held, nil
	}
	cur, err := s.coll.Find(ctx, bson.D{
		{Key: "fingerprint", Value: bson.D{{Key: "$in", Value: want}}},
		{Key: "status", Value: StatusPending},
	}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 0}, {Key: "fingerprint", Value: 1}}))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		if fp, ok := cur.Current.Lookup("fingerprint").StringValueOK(); ok {
			held[fp] = true
		}
	}
	return held, cur.Err()
}
