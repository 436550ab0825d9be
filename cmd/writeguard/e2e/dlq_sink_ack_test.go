package e2e

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// TestDLSinkRefusesUnacknowledged: a MongoSink over a collection with
// w: 0 never reports envelopes stored (the server confirmed nothing): Put
// fails with ErrUnacknowledgedSink in both modes, and a guarded write
// that dead-letters through it ends dead_letter_failed, not dead_lettered.
func TestDLSinkRefusesUnacknowledged(t *testing.T) {
	b := newDLBed(t, dlSchema)
	unacked := b.ddb.Collection(dlDLQ, options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	orig := dlDoc("_id", "w0", "sku", "X")
	raw, err := bson.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]dlq.SinkOption{nil, {dlq.WithInsertFirst()}} {
		// A client of its own per sink: FerretDB answers an unacknowledged
		// (moreToCome) write all the same, and the next command on that
		// connection (the sink's listIndexes) would read that answer.
		c, cerr := mongo.Connect(options.Client().ApplyURI(dlServer.URI()))
		if cerr != nil {
			t.Fatal(cerr)
		}
		defer c.Disconnect(b.ctx)
		unacked0 := c.Database(b.dbName).Collection(dlDLQ, options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
		sink := dlq.NewMongoSink(unacked0, opts...)
		err := sink.Put(b.ctx, []envelope.Envelope{{Original: raw, Code: 121, Namespace: b.ns(), Operation: "insertOne"}})
		if !errors.Is(err, dlq.ErrUnacknowledgedSink) {
			t.Errorf("Put through w:0 (%d options): %v, want ErrUnacknowledgedSink", len(opts), err)
		}
		// Later Puts refuse at once: nothing more is sent unacknowledged.
		if err := sink.Put(b.ctx, []envelope.Envelope{{Original: raw, Code: 121, Namespace: b.ns(), Operation: "insertOne"}}); !errors.Is(err, dlq.ErrUnacknowledgedSink) {
			t.Errorf("second Put through w:0 (%d options): %v, want ErrUnacknowledgedSink", len(opts), err)
		}
	}
	g, err := writeguard.Wrap(b.adb.Collection(dlTarget), writeguard.WithDeadLetter(dlq.NewMongoSink(unacked)),
		writeguard.WithBackoff(dlFastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertOne(b.ctx, dlDoc("_id", "w0-doc", "sku", "Y"))
	var rep *writeguard.Report
	if !errors.As(err, &rep) || len(rep.Outcomes) != 1 {
		t.Fatalf("InsertOne: %v", err)
	}
	if d := rep.Outcomes[0].Disposition; d != writeguard.DeadLetterFailed {
		t.Errorf("disposition %s, want %s: a sink under w:0 claimed the envelope stored", d, writeguard.DeadLetterFailed)
	}
}
