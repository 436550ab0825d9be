package writeguard_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// An ordered write sends its whole tail after each of its first two
// rejections (engine.OrderedWindowFrom): one or two handled documents in a
// batch cost one command each, as with the driver alone (issue 32: the
// window from the first rejection took the amplification benchmark from 48
// to 71 commands). From the third, the tail goes in a window
// (engine.OrderedWindow): after a stop at position p, max(2·(p+1), 16)
// documents.
func TestOrderedWindowOpensAtThirdRejection(t *testing.T) {
	cases := []struct {
		bad  []int32
		sent []int // documents per command
	}{
		{bad: []int32{10}, sent: []int{100, 89}},
		{bad: []int32{10, 50}, sent: []int{100, 89, 49}},
		// the third stop, at the first document of its command: a window
		// of max(2·1, 16) = 16, then doubled after a window that went
		// through.
		{bad: []int32{10, 50, 51}, sent: []int{100, 89, 49, 16, 32}},
	}
	for _, tc := range cases {
		bad := map[int32]bool{}
		for _, b := range tc.bad {
			bad[b] = true
		}
		fake := mocks.NewFake("db.window").Validator(func(doc bson.Raw) (bson.Raw, bool) {
			return nil, bad[doc.Lookup("_id").Int32()]
		})
		fx := newFixture(t, fake)
		docs := make([]any, 100)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: int32(i)}}
		}
		_, err := fx.g.InsertMany(ctx, docs)
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Count(writeguard.DeadLettered) != len(tc.bad) || r.Count(writeguard.Written) != 100-len(tc.bad) {
			t.Fatalf("bad %v: err = %v, want %d dead_lettered and the rest written", tc.bad, err, len(tc.bad))
		}
		var sent []int
		for _, c := range fake.Calls() {
			sent = append(sent, len(c.Docs))
		}
		if len(sent) != len(tc.sent) {
			t.Errorf("bad %v: documents per command %v, want %v", tc.bad, sent, tc.sent)
			continue
		}
		for i := range sent {
			if sent[i] != tc.sent[i] {
				t.Errorf("bad %v: documents per command %v, want %v", tc.bad, sent, tc.sent)
				break
			}
		}
	}
}
