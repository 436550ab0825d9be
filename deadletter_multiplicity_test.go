package writeguard_test

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// TestDeadLetterMultiplicity (issue 30 item 3): identical documents
// without _id rejected in one call reach the sink as one envelope per
// Put carrying how many the call has handed over so far (300 identical
// documents of an ordered call: a gathered Put at 256, then one at 300),
// every document dead_lettered; documents with the caller's _id count
// once, however many.
func TestDeadLetterMultiplicity(t *testing.T) {
	fake := mocks.NewFake("db.mult").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true })
	sink := &mocks.Sink{}
	g, err := writeguard.New(fake, writeguard.WithDeadLetter(sink))
	if err != nil {
		t.Fatal(err)
	}
	docs := make([]any, 300)
	for i := range docs {
		docs[i] = bson.D{{Key: "sku", Value: "A"}}
	}
	_, err = g.InsertMany(context.Background(), docs) // ordered: one command per invalid document
	var r *writeguard.Report
	if !errors.As(err, &r) || !r.Handled() {
		t.Fatalf("err = %v, want a handled Report", err)
	}
	for i, o := range r.Outcomes {
		if o.Disposition != writeguard.DeadLettered {
			t.Fatalf("document %d: %s", i, o.Disposition)
		}
	}
	envs := sink.Envelopes()
	if sink.Puts() != 2 || len(envs) != 2 {
		t.Fatalf("%d Puts of %d envelopes, want 2 of 1 each", sink.Puts(), len(envs))
	}
	if envs[0].Multiplicity != 256 || envs[1].Multiplicity != 300 || envs[0].Fingerprint != envs[1].Fingerprint {
		t.Errorf("multiplicities %d, %d, want 256 then 300, one fingerprint", envs[0].Multiplicity, envs[1].Multiplicity)
	}
	if envs[0].Attempts+envs[1].Attempts != 300 {
		t.Errorf("attempts %d + %d, want 300", envs[0].Attempts, envs[1].Attempts)
	}

	sink2 := &mocks.Sink{}
	g2, err := writeguard.New(fake, writeguard.WithDeadLetter(sink2))
	if err != nil {
		t.Fatal(err)
	}
	same := []any{bson.D{{Key: "_id", Value: "x"}, {Key: "sku", Value: "B"}}, bson.D{{Key: "_id", Value: "x"}, {Key: "sku", Value: "B"}}}
	_, _ = g2.InsertMany(context.Background(), same, options.InsertMany().SetOrdered(false))
	envs = sink2.Envelopes()
	if len(envs) != 1 || envs[0].Copies() != 1 || envs[0].Attempts != 2 {
		t.Errorf("caller _id twice: %d envelopes, multiplicity %d, attempts %d; want 1, 1, 2", len(envs), envs[0].Multiplicity, envs[0].Attempts)
	}
}
