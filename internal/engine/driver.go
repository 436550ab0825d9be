package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/internal/driveropts"
)

// AddBulk adds one attempt's result to total; UpsertedIDs are keyed by the
// caller's indices.
func AddBulk(total, res *mongo.BulkWriteResult, b Batch) {
	total.InsertedCount += res.InsertedCount
	total.MatchedCount += res.MatchedCount
	total.ModifiedCount += res.ModifiedCount
	total.DeletedCount += res.DeletedCount
	total.UpsertedCount += res.UpsertedCount
	for idx, id := range res.UpsertedIDs {
		if idx >= 0 && int(idx) < len(b) {
			if total.UpsertedIDs == nil {
				total.UpsertedIDs = map[int64]any{}
			}
			total.UpsertedIDs[int64(b.Index(int(idx)))] = id
		}
	}
}

// TransactionRunning reports whether ctx carries a session with a
// transaction in progress.
func TransactionRunning(ctx context.Context) bool {
	s := mongo.SessionFromContext(ctx)
	return s != nil && s.TransactionRunning()
}

// Ordered reads the ordered option from a call's options (driver
// default: true), applying them as the driver does (driveropts.Apply).
func Ordered[T any](opts []options.Lister[T], get func(*T) *bool) (bool, error) {
	if len(opts) == 0 {
		return true, nil // the driver's default
	}
	var o T
	if err := driveropts.Apply(opts, &o); err != nil {
		return false, err
	}
	v := get(&o)
	return v == nil || *v, nil
}
