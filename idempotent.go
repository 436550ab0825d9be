package writeguard

import (
	"context"
	"slices"
)

type idempotentModelsKey struct{}

// IdempotentModels returns a context that marks the models at the given
// indexes of the guarded calls made with it as idempotent (see "Which
// writes are idempotent" in the package documentation): after a failure that may have
// applied them, they are re-sent; the other models of the call are not.
// Indexes are positions in the BulkWrite models slice; for a method of one
// write (UpdateOne, FindOneAndUpdate, ...) index 0 is its write. It marks
// nothing for indexes out of range, and adds to the indexes of an outer
// IdempotentModels. WithIdempotent marks every model of a call instead.
// It is a side channel rather than a wrapper model type because the driver
// switches on the concrete model types.
func IdempotentModels(ctx context.Context, indexes ...int) context.Context {
	if ctx == nil {
		ctx = context.Background() // as the guarded methods take a nil ctx
	}
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
