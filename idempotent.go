package writeguard

import (
	"context"
	"slices"
)

// # Which writes are idempotent
//
// A write is idempotent when applying it twice leaves the collection as
// applying it once does. writeguard cannot read that off a model: it
// depends on the filter as well as the update. After a failure that may
// have applied a write (a lost reply, a timeout after sending, an
// interrupted command, a retryable write concern error: policy.ReplyShapes),
// writeguard re-sends an update, replace or delete only when the caller
// marked it idempotent (WithIdempotent for every model of a call,
// IdempotentModels for some); otherwise it ends unknown (or
// written_unconfirmed after a write concern error). The driver's own
// retryable-write retry is deduplicated by the server (lsid, txnNumber);
// writeguard's re-send is a new command and is not.
//
// Idempotent, safe to mark:
//   - $set, $unset, $setOnInsert, $min, $max, $addToSet of constants, with a
//     filter the update cannot change (by _id, or on fields the update does
//     not write): {_id: 7} / {$set: {status: "paid"}};
//   - a replace by _id or by a field the replacement keeps;
//   - an upsert whose filter the upserted document still matches;
//   - a delete by _id or unique key (DeleteOne, FindOneAndDelete), and a
//     DeleteMany whose filter no new document can match meanwhile.
//
// Not idempotent, never mark:
//   - $inc, $mul, $push, $pop, $pull of a position, $currentDate, $rename;
//   - an update pipeline reading the old value ([{$set: {n: {$add: ["$n", 1]}}}]);
//   - any update whose filter names a field the update changes
//     ({status: "new"} / {$set: {status: "sent"}} selects another
//     document the second time, for UpdateOne and DeleteOne alike);
//   - DeleteOne by a non-unique filter (the second run deletes another
//     document), FindOneAndUpdate/FindOneAndDelete with a sort over a set
//     the first run changed.
//
// Inserts never need marking: writeguard assigns their _id before the
// first attempt, so a re-sent insert meets a duplicate key on its own _id
// and is read back (already_written) instead of being stored twice.

type idempotentModelsKey struct{}

// IdempotentModels returns a context that marks the models at the given
// indexes of the next guarded call made with it as idempotent (see
// "Which writes are idempotent" above): after a failure that may have
// applied them, they are re-sent; the other models of the call are not.
// Indexes are positions in the BulkWrite models slice; for a method of one
// write (UpdateOne, FindOneAndUpdate, ...) index 0 is its write. It marks
// nothing for indexes out of range, and adds to the indexes of an outer
// IdempotentModels. WithIdempotent marks every model of a call instead.
// It is a side channel rather than a wrapper model type because the driver
// switches on the concrete model types.
func IdempotentModels(ctx context.Context, indexes ...int) context.Context {
	prev, _ := ctx.Value(idempotentModelsKey{}).([]int)
	all := append(slices.Clone(prev), indexes...)
	slices.Sort(all)
	return context.WithValue(ctx, idempotentModelsKey{}, slices.Compact(all))
}

// idempotentModels returns the indexes ctx marks (IdempotentModels).
func idempotentModels(ctx context.Context) []int {
	v, _ := ctx.Value(idempotentModelsKey{}).([]int)
	return v
}
