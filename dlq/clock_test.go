package dlq

import (
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/envelope"
)

// The sinks stamp envelopes from time.Now, the one time source of the
// package: in a synctest bubble the stamps are the bubble's clock,
// exactly, truncated to BSON's milliseconds.
func TestTimestampsFromTimeNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(1500*time.Millisecond + 700*time.Microsecond)
		want := time.Now().UTC().Truncate(time.Millisecond)
		raw, err := StoredDocument(envelope.Envelope{Original: mustMarshal(t, map[string]int{"a": 1}), Code: 121})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"first_seen", "last_seen"} {
			if got := raw.Lookup(k).Time().UTC(); !got.Equal(want) {
				t.Errorf("%s = %v, want the bubble's now %v", k, got, want)
			}
		}
		q, err := Filter{OlderThan: time.Hour}.Query(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		raw, err = bson.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		bound := raw.Lookup("first_seen", "$lt").Time().UTC()
		if !bound.Equal(time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)) {
			t.Errorf("OlderThan 1h bounds first_seen at %v, want the bubble's now − 1h", bound)
		}
	})
}
