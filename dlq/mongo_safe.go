package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/policy"
)

var _ envelope.PartialSink = (*MongoSink)(nil)

// ErrIndexMissing is wrapped by MongoSink.Put's error when the dead-letter
// collection's unique fingerprint index is gone and re-establishing it
// failed: the sink stores nothing rather than envelopes a later capture
// or replay could duplicate.
var ErrIndexMissing = errors.New("dlq: the dead-letter collection has no unique index on fingerprint")

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
// EnsureCollection when it is not (see MongoSink, "Lost indexes"), at
// most every WithIndexCheckInterval unless a Put failed since.
func (s *MongoSink) checkIndexes(ctx context.Context) error {
	if !s.checkDue() {
		return nil
	}
	err := s.checkIndexesNow(ctx)
	if err == nil {
		s.checkedAt.Store(time.Now().UnixNano())
		s.recheck.Store(false)
	}
	return err
}

// checkDue reports whether a Put must check the indexes: never checked,
// a Put failed since the last check, or the last check is
// WithIndexCheckInterval old.
func (s *MongoSink) checkDue() bool {
	at := s.checkedAt.Load()
	if at == 0 || s.recheck.Load() || s.cfg.indexCheckInterval <= 0 {
		return true
	}
	age := time.Since(time.Unix(0, at))
	return age < 0 || age >= s.cfg.indexCheckInterval // a clock stepped back: check
}

// IndexChecks returns how many times s listed the dead-letter
// collection's indexes (at most one per WithIndexCheckInterval, plus one
// after each failed Put).
func (s *MongoSink) IndexChecks() int64 { return s.indexChecks.Load() }

// checkIndexesNow is the check itself.
func (s *MongoSink) checkIndexesNow(ctx context.Context) error {
	ok, err := s.hasFingerprintIndex(ctx)
	if err != nil && hasCode(err, codeUnauthorized) {
		// A role that may write the DLQ but not list its indexes: the
		// check cannot be made; storing goes on as before it existed.
		if s.uncheckable.CompareAndSwap(false, true) && s.cfg.logger != nil {
			s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dlq: not allowed to list the dead-letter collection's indexes (13 Unauthorized): a lost unique fingerprint index will not be noticed; grant listIndexes",
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
			s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dlq: the dead-letter collection lost its unique fingerprint index and it could not be re-established; storing nothing",
				slog.String("namespace", ns), slog.String("error", policy.ScrubError(err)))
		}
		return fmt.Errorf("%w (%s), and re-establishing it failed; nothing stored: %w", ErrIndexMissing, ns, err)
	}
	s.reestablished.Add(1)
	if s.cfg.logger != nil {
		s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dlq: the dead-letter collection had lost its unique fingerprint index (dropped?); re-established it before storing",
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
	s.indexChecks.Add(1)
	idx, err := listIndexes(ctx, s.coll.Clone(options.Collection().SetWriteConcern(writeconcern.W1())))
	if err != nil {
		if hasCode(err, codeNamespaceNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("dlq: checking the dead-letter collection's indexes: %w", err)
	}
	ex := findIndex(idx, []keyField{{"fingerprint", 1}})
	return ex != nil && ex.Unique, nil
}
