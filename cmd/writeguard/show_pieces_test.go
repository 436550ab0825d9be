package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// TestDLQShowOriginalInPieces: an original too large for its envelope is
// kept whole in pieces; dlq show names the pieces (size, count, SHA-256)
// instead of printing the stored envelope's empty original as "{}", which
// an operator could take for an empty document.
func TestDLQShowOriginalInPieces(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, db := openDemoDLQ(t, dir)
	orig, err := bson.Marshal(bson.D{{Key: "_id", Value: "huge-1"}, {Key: "blob", Value: strings.Repeat("x", envelope.MaxEnvelopeSize)}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	env := envelope.Envelope{Original: orig, DocumentID: bson.Raw(orig).Lookup("_id"), Code: 121,
		Namespace: demo.DefaultDatabase + "." + demo.DefaultCollection, Operation: "insertMany", FirstSeen: now, LastSeen: now}
	if err := deadletter.NewMongoSink(db.Collection(demo.DefaultDLQ)).Put(ctx, []envelope.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCmd(t, ctx, "dlq", "show", "huge-1", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "original in pieces") || !strings.Contains(out, "2 pieces") || strings.Contains(out, "original:\n  {}") {
		t.Errorf("show: %d\n%s\n%s", code, out, errOut)
	}
	show := dlqJSON(t, 0, "show", "huge-1", "--data-dir", dir)
	p, ok := show["original_pieces"].(map[string]any)
	if !ok || num(p["count"]) != 2 || show["original"] != nil {
		t.Errorf("show --json: original_pieces %v, original %v; want the pieces named and no empty original", show["original_pieces"], show["original"])
	}
}
