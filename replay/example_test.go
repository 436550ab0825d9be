package replay_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/replay"
)

// After widening the orders validator, check what would now pass, then
// drain the backlog of envelopes rejected for a missing qty.
func ExampleRun() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	db := client.Database("shop")
	dlqColl := db.Collection("orders_dlq")

	// The replay's target retries transient errors but does NOT
	// dead-letter: replay records rejections in the envelopes itself.
	target, err := writeguard.Wrap(db.Collection("orders"))
	if err != nil {
		log.Fatal(err)
	}
	filter := dlq.Filter{Paths: []string{"qty"}}

	dry, err := replay.Run(ctx, dlqColl, target, replay.WithFilter(filter), replay.WithDryRun())
	switch {
	case errors.Is(err, replay.ErrDryRunUnsupported):
		log.Print(err) // e.g. FerretDB: no $replaceRoot
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("%d of %d would pass now\n", dry.WouldPass, dry.Matched)
	}

	res, err := replay.Run(ctx, dlqColl, target,
		replay.WithFilter(filter),
		replay.WithBatchSize(500),
		replay.WithRate(2000), // documents per second
		replay.WithProgress(func(p replay.Progress) {
			log.Printf("batch %d: %d replayed, %d still invalid", p.Batches, p.Replayed, p.StillInvalid)
		}),
	)
	if err != nil {
		log.Print(err) // what was not marked stays pending: run again later
	}
	fmt.Printf("replayed %d, still invalid %d, conflicts %d, failed %d, skipped %d\n",
		res.Replayed, res.StillInvalid, res.Conflicts, res.Failed, res.Skipped)
	for _, p := range res.Problems {
		fmt.Println(p.Outcome, p.Fingerprint, p.Code, p.Reason)
	}
}

// Try a proposed validator against the backlog before applying it.
func ExampleWithValidator() {
	ctx := context.Background()
	var dlqColl, orders *mongo.Collection

	proposed := bson.D{{Key: "$jsonSchema", Value: bson.D{
		{Key: "properties", Value: bson.D{{Key: "qty", Value: bson.D{{Key: "bsonType", Value: "number"}}}}},
	}}}
	res, err := replay.Run(ctx, dlqColl, orders, replay.WithDryRun(), replay.WithValidator(proposed))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("would pass %d, would still fail %d, cannot tell %d\n", res.WouldPass, res.WouldFail, res.Undetermined)
}

// Replay the update and delete models of bulkWrite envelopes into two
// named collections, quarantining envelopes after 3 failed replays. Any
// envelope aimed elsewhere (another namespace, admin, a system
// collection), any updateMany/deleteMany and any filter without an _id
// condition is refused and reported, not run.
func ExampleWithInto() {
	ctx := context.Background()
	var dlqColl, orders *mongo.Collection // shop.orders_dlq, shop.orders

	res, err := replay.Run(ctx, dlqColl, orders,
		replay.WithInto("shop.orders"),
		replay.WithOperations(replay.Inserts|replay.Updates|replay.Deletes),
		replay.WithQuarantineAfter(3),
	)
	if err != nil {
		log.Print(err)
	}
	fmt.Printf("replayed %d; refused %d, held %d, quarantined %d\n", res.Replayed, res.Refused, res.Held, res.Quarantined)
	for _, p := range res.Problems {
		if p.Outcome == "refused" || p.Outcome == "held" {
			fmt.Println(p.Outcome, p.EnvelopeID, p.Reason)
		}
	}
}

// Discard what a filter selects without racing a running replay: the
// envelopes a replay holds are left to it and counted.
func ExampleDiscard() {
	ctx := context.Background()
	var dlqColl *mongo.Collection

	d, err := replay.Discard(ctx, dlqColl, dlq.Filter{Keywords: []string{"pattern"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("discarded %d; %d held by a running replay (run again after it)\n", d.Discarded, d.Busy)
}
