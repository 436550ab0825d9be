package dlq

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/envelope"
)

// Filter selects envelopes of the dead-letter collection, for Stats,
// Discard and package replay. Every set criterion must hold (AND); within
// one criterion any listed value may match (OR). The zero Filter selects
// every envelope, whatever its status; each operation says what it does
// with an empty Statuses (Stats: every status; Discard and replay:
// pending only).
type Filter struct {
	// Keywords selects envelopes whose failing_keywords holds any of
	// these (e.g. "required", "minimum", "$lt", "unknown").
	Keywords []string
	// Paths selects envelopes whose failing_paths holds any of these
	// dotted paths, exactly (e.g. "qty", "address.zip").
	Paths []string
	// Codes selects envelopes by server error code (e.g. 121).
	Codes []int32
	// Namespaces selects envelopes by "<database>.<collection>" of the
	// write's target.
	Namespaces []string
	// Statuses selects envelopes by status: envelope.StatusPending,
	// envelope.StatusReplayed, envelope.StatusDiscarded, envelope.StatusQuarantined.
	Statuses []string
	// Fingerprints selects envelopes by fingerprint (64 lowercase hex
	// digits).
	Fingerprints []string
	// FirstSeenBefore and FirstSeenAfter select envelopes first captured
	// strictly before, and at or after, these instants (zero: no bound).
	FirstSeenBefore time.Time
	FirstSeenAfter  time.Time
	// OlderThan and NewerThan select envelopes first captured more than,
	// and at most, this long before the time the filter is turned into a
	// query (zero: no bound; negative: an error). They combine with
	// FirstSeenBefore/After (all bounds hold).
	OlderThan time.Duration
	NewerThan time.Duration
}

// IsZero reports whether f sets no criterion.
func (f Filter) IsZero() bool {
	return len(f.Keywords) == 0 && len(f.Paths) == 0 && len(f.Codes) == 0 &&
		len(f.Namespaces) == 0 && len(f.Statuses) == 0 && len(f.Fingerprints) == 0 &&
		f.FirstSeenBefore.IsZero() && f.FirstSeenAfter.IsZero() && f.OlderThan == 0 && f.NewerThan == 0
}

// ErrBadFilter is wrapped by every error of Filter.Validate and
// Filter.Query.
var ErrBadFilter = errors.New("dlq: bad filter")

// Validate checks f and returns an error wrapping ErrBadFilter that names
// the first bad value: an empty keyword, path, namespace or fingerprint,
// a fingerprint that is not 64 lowercase hex digits, a status other than
// pending, replayed, discarded and quarantined, a code ≤ 0, a negative
// OlderThan or NewerThan, or bounds that select no instant at all (FirstSeenAfter not
// before FirstSeenBefore, NewerThan not longer than OlderThan).
func (f Filter) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadFilter, fmt.Sprintf(format, args...))
	}
	for _, k := range f.Keywords {
		if strings.TrimSpace(k) == "" {
			return bad("empty keyword")
		}
	}
	for _, p := range f.Paths {
		if strings.TrimSpace(p) == "" {
			return bad("empty path")
		}
	}
	for _, ns := range f.Namespaces {
		if strings.TrimSpace(ns) == "" {
			return bad("empty namespace")
		}
	}
	for _, c := range f.Codes {
		if c <= 0 {
			return bad("code %d: server error codes are positive", c)
		}
	}
	for _, s := range f.Statuses {
		switch s {
		case envelope.StatusPending, envelope.StatusReplayed, envelope.StatusDiscarded, envelope.StatusQuarantined:
		default:
			return bad("status %q: want %q, %q, %q or %q", s, envelope.StatusPending, envelope.StatusReplayed, envelope.StatusDiscarded, envelope.StatusQuarantined)
		}
	}
	for _, fp := range f.Fingerprints {
		if !isFingerprint(fp) {
			return bad("fingerprint %q: want 64 lowercase hex digits", fp)
		}
	}
	if f.OlderThan < 0 {
		return bad("negative OlderThan %v", f.OlderThan)
	}
	if f.NewerThan < 0 {
		return bad("negative NewerThan %v", f.NewerThan)
	}
	if !f.FirstSeenBefore.IsZero() && !f.FirstSeenAfter.IsZero() && !f.FirstSeenAfter.Before(f.FirstSeenBefore) {
		return bad("FirstSeenAfter %v is not before FirstSeenBefore %v: no envelope can match",
			f.FirstSeenAfter.UTC().Format(time.RFC3339Nano), f.FirstSeenBefore.UTC().Format(time.RFC3339Nano))
	}
	if f.OlderThan > 0 && f.NewerThan > 0 && f.NewerThan <= f.OlderThan {
		return bad("NewerThan %v is not longer than OlderThan %v: no envelope can match", f.NewerThan, f.OlderThan)
	}
	return nil
}

func isFingerprint(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Query returns f as a query document on the dead-letter collection's
// stored fields, with OlderThan and NewerThan taken relative to now:
//
//	{failing_keywords: {$in: [...]}, failing_paths: {$in: [...]},
//	 code: {$in: [...]}, namespace: {$in: [...]}, status: {$in: [...]},
//	 fingerprint: {$in: [...]}, first_seen: {$lt: ..., $gte: ...}}
//
// with only the criteria f sets ({} for the zero Filter). The first_seen
// bounds are the tightest of FirstSeenBefore/After and
// now − OlderThan/NewerThan. It returns Validate's error for a bad f.
func (f Filter) Query(now time.Time) (bson.D, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	q := bson.D{}
	in := func(field string, vals any) {
		q = append(q, bson.E{Key: field, Value: bson.D{{Key: "$in", Value: vals}}})
	}
	if len(f.Keywords) > 0 {
		in("failing_keywords", f.Keywords)
	}
	if len(f.Paths) > 0 {
		in("failing_paths", f.Paths)
	}
	if len(f.Codes) > 0 {
		in("code", f.Codes)
	}
	if len(f.Namespaces) > 0 {
		in("namespace", f.Namespaces)
	}
	if len(f.Statuses) > 0 {
		in("status", f.Statuses)
	}
	if len(f.Fingerprints) > 0 {
		in("fingerprint", f.Fingerprints)
	}
	before, after := f.FirstSeenBefore, f.FirstSeenAfter
	if f.OlderThan > 0 {
		if b := now.Add(-f.OlderThan); before.IsZero() || b.Before(before) {
			before = b
		}
	}
	if f.NewerThan > 0 {
		if a := now.Add(-f.NewerThan); after.IsZero() || a.After(after) {
			after = a
		}
	}
	if !before.IsZero() && !after.IsZero() && !after.Before(before) {
		return nil, fmt.Errorf("%w: the first_seen bounds (after %v, before %v) select no instant",
			ErrBadFilter, after.UTC().Format(time.RFC3339Nano), before.UTC().Format(time.RFC3339Nano))
	}
	var r bson.D
	if !before.IsZero() {
		r = append(r, bson.E{Key: "$lt", Value: before.UTC()})
	}
	if !after.IsZero() {
		r = append(r, bson.E{Key: "$gte", Value: after.UTC()})
	}
	if r != nil {
		q = append(q, bson.E{Key: "first_seen", Value: r})
	}
	return q, nil
}

// WithDefaultStatus returns f with Statuses set to statuses when f lists
// none (how Discard and replay default to pending envelopes).
func (f Filter) WithDefaultStatus(statuses ...string) Filter {
	if len(f.Statuses) == 0 {
		f.Statuses = statuses
	}
	return f
}
