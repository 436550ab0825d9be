package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
)

// ErrEmptyFilter is returned by Discard for a zero Filter, which would
// discard every pending envelope: say so explicitly with
// Filter{Statuses: []string{envelope.StatusPending}}.
var ErrEmptyFilter = errors.New("dlq: empty filter: refusing to discard every pending envelope (set Statuses: [pending] to mean all)")

// Discard marks the envelopes of dlq that f selects (pending ones when f
// lists no status) as given up: status discarded, discarded_at now. A
// discarded envelope is never replayed; a recapture of its payload puts it
// back to pending. Envelopes already discarded are left as they are, and
// so are the pieces of an original kept apart (the envelope is kept, for
// inspection: see PiecesCollectionSuffix). It returns how many envelopes
// it marked, with one updateMany.
//
// Discard does not coordinate with a replay running on dlq: an envelope
// a replay has just read may still be written after Discard marked it.
// When replays may be running, use replay.Discard, which claims each
// envelope first and leaves those a replay holds.
//
// It returns ErrEmptyFilter for a zero f, f's error (wrapping
// ErrBadFilter), or the driver's.
func Discard(ctx context.Context, dlq *mongo.Collection, f Filter) (int64, error) {
	if f.IsZero() {
		return 0, ErrEmptyFilter
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	q, err := f.WithDefaultStatus(envelope.StatusPending).Query(now)
	if err != nil {
		return 0, err
	}
	q = append(q, bson.E{Key: "$and", Value: bson.A{bson.D{{Key: "status", Value: bson.D{{Key: "$ne", Value: envelope.StatusDiscarded}}}}}})
	res, err := dlq.UpdateMany(ctx, q, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: envelope.StatusDiscarded},
		{Key: "discarded_at", Value: now},
	}}})
	if err != nil {
		return 0, fmt.Errorf("dlq: discard: %w", err)
	}
	return res.ModifiedCount, nil
}

// DiscardIDs marks the envelopes of dlq whose _id is one of ids as given
// up (status discarded, discarded_at now), whatever their other fields
// hold: it is how an envelope that cannot be decoded (envelope.DecodeError) is
// taken out of the way. Envelopes already discarded or replayed are left
// as they are. It returns how many envelopes it marked, with one
// updateMany; no ids is a no-op.
//
// It returns the driver's error.
func DiscardIDs(ctx context.Context, dlq *mongo.Collection, ids []bson.RawValue) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	in := make(bson.A, len(ids))
	for i, id := range ids {
		in[i] = id
	}
	res, err := dlq.UpdateMany(ctx, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}},
		{Key: "status", Value: bson.D{{Key: "$nin", Value: bson.A{envelope.StatusDiscarded, envelope.StatusReplayed}}}},
	}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "status", Value: envelope.StatusDiscarded},
		{Key: "discarded_at", Value: now},
	}}})
	if err != nil {
		return 0, fmt.Errorf("dlq: discard: %w", err)
	}
	return res.ModifiedCount, nil
}
