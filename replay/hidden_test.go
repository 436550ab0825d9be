package replay

import (
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/writeguard/writeguard/mocks"
)

// TestClassifyHiddenAttempt: the errors that say "not sent" or "nothing
// written" of the driver's last attempt only (a deadline before a
// retry's send, a cleared pool at its checkout, an overload reply
// labelled NoWritesPerformed) leave a replayed update ambiguous (held,
// as after a death) when its command is retryable by the driver, and
// prove it not applied for a group of multi statements, which the
// driver never retries (C67, replay's side).
func TestClassifyHiddenAttempt(t *testing.T) {
	var nwp bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(`{"ok":0,"code":462,"errmsg":"overloaded","errorLabels":["SystemOverloadedError","RetryableError","NoWritesPerformed"]}`), false, &nwp); err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{
		"ctx":          fmt.Errorf("%w: rtt 2ms", driver.ErrDeadlineWouldBeExceeded),
		"pool_clear":   mocks.PoolClearedError{Address: "localhost:27017"},
		"overload_nwp": mocks.ReplyError(mocks.OpBulkWrite, nwp),
	}
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
	for name, err := range errs {
		one := []*entry{{model: &mongo.UpdateOneModel{Filter: bson.D{}, Update: inc}}}
		classify(one, err)
		holdAmbiguous(one)
		if !one[0].ambiguous || one[0].out != outHeld {
			t.Errorf("%s, updateOne: ambiguous %v outcome %d, want ambiguous and held", name, one[0].ambiguous, one[0].out)
		}
		many := []*entry{{model: &mongo.UpdateManyModel{Filter: bson.D{}, Update: inc}}}
		classify(many, err)
		holdAmbiguous(many)
		if many[0].ambiguous || many[0].out != outFailed {
			t.Errorf("%s, updateMany: ambiguous %v outcome %d, want not ambiguous, failed (not applied)", name, many[0].ambiguous, many[0].out)
		}
	}
}

// TestClassifyMultiStatementWriteError: a write error on a replayed
// UpdateMany (121 on its second document, C70) may have left the first
// changed: held as ambiguous, never "rejected again".
func TestClassifyMultiStatementWriteError(t *testing.T) {
	var reply bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(`{"ok":1,"n":1,"writeErrors":[{"index":0,"code":121,"errmsg":"Document failed validation"}]}`), false, &reply); err != nil {
		t.Fatal(err)
	}
	err := mocks.ReplyError(mocks.OpBulkWrite, reply)
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
	many := []*entry{{model: &mongo.UpdateManyModel{Filter: bson.D{}, Update: inc}}}
	classify(many, err)
	holdAmbiguous(many)
	if many[0].out != outHeld || !many[0].ambiguous {
		t.Errorf("updateMany: outcome %d ambiguous %v, want held", many[0].out, many[0].ambiguous)
	}
	one := []*entry{{model: &mongo.UpdateOneModel{Filter: bson.D{}, Update: inc}}}
	classify(one, err)
	if one[0].out != outInvalid {
		t.Errorf("updateOne: outcome %d, want invalid (rejected again)", one[0].out)
	}
}
