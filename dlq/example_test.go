package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// Set up the dead-letter collection at start-up, then guard a collection
// so that documents its validator rejects (121) are kept in it, with a
// local file as fallback when the DLQ cannot be written.
func Example() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	db := client.Database("shop")

	// Idempotent: run it at every start-up.
	rep, err := dlq.EnsureCollection(ctx, db, "orders_dlq")
	if err != nil {
		log.Fatal(err)
	}
	log.Print(rep) // validator, TTL index, fingerprint index: applied/already/unsupported

	fallback, err := dlq.NewFileSink("/var/lib/shop/orders_dlq.jsonl")
	if err != nil {
		log.Fatal(err)
	}
	defer fallback.Close()

	orders, err := writeguard.Wrap(db.Collection("orders"),
		writeguard.WithDeadLetter(dlq.NewMongoSink(db.Collection("orders_dlq"))),
		writeguard.WithFallbackDeadLetter(fallback),
	)
	if err != nil {
		log.Fatal(err)
	}

	_, err = orders.InsertMany(ctx, []any{
		bson.D{{Key: "sku", Value: "A-1"}, {Key: "qty", Value: 2}},
		bson.D{{Key: "sku", Value: "B-7"}}, // no qty: rejected by the validator
	})
	switch {
	case err == nil:
	case writeguard.Handled(err) && errors.Is(err, writeguard.ErrDeadLettered):
		log.Print("some orders were dead-lettered: ", err)
	default:
		log.Fatal(err)
	}
}

// A redaction hook drops a sensitive field from the stored original (and
// the errInfo's copy of the values) while the fingerprint stays that of
// the full payload.
func ExampleWithRedact() {
	var dlqColl *mongo.Collection // the dead-letter collection

	dropSSN := func(doc bson.Raw) bson.Raw {
		var d bson.D
		if err := bson.Unmarshal(doc, &d); err != nil {
			return nil // stores an empty document rather than the payload
		}
		d = slices.DeleteFunc(d, func(e bson.E) bool { return e.Key == "ssn" })
		out, _ := bson.Marshal(d)
		return out
	}
	dropValues := func(bson.Raw) bson.Raw {
		out, _ := bson.Marshal(bson.D{{Key: "redacted", Value: true}})
		return out
	}
	sink := dlq.NewMongoSink(dlqColl, dlq.WithRedact(dropSSN), dlq.WithRedactErrInfo(dropValues))
	_ = sink
}

// Summarise the backlog: what fails, where, since when.
func ExampleStats() {
	ctx := context.Background()
	var dlqColl *mongo.Collection // the dead-letter collection

	s, err := dlq.Stats(ctx, dlqColl, dlq.Filter{Statuses: []string{envelope.StatusPending}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d pending envelopes (%d captures), oldest %v old\n", s.Pending, s.Attempts, s.OldestPendingAge.Round(time.Minute))
	for _, g := range s.ByKeyword {
		fmt.Printf("  %-20s %6d\n", g.Key, g.Envelopes)
	}
	for _, g := range s.ByPath {
		fmt.Printf("  %-20s %6d\n", g.Key, g.Envelopes)
	}
}

// Give up on the envelopes of a retired collection older than a week.
func ExampleDiscard() {
	ctx := context.Background()
	var dlqColl *mongo.Collection // the dead-letter collection

	n, err := dlq.Discard(ctx, dlqColl, dlq.Filter{
		Namespaces: []string{"shop.legacy_orders"},
		OlderThan:  7 * 24 * time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "envelopes discarded")
}

// Load a fallback file into the dead-letter collection (recaptures merge
// by fingerprint), after which package replay drains it as usual.
func ExampleReadFile() {
	ctx := context.Background()
	var dlqColl *mongo.Collection // the dead-letter collection

	envs, err := dlq.ReadFile("/var/lib/shop/orders_dlq.jsonl")
	if err != nil {
		log.Print(err) // envs holds the envelopes read before a bad line
	}
	if err := dlq.NewMongoSink(dlqColl).Put(ctx, envs); err != nil {
		log.Fatal(err)
	}
}
