package policy_test

import (
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

func TestReplyShapesTable(t *testing.T) {
	for i, row := range policy.ReplyShapes() {
		if int(row.Shape) != i || row.Name == "" || len(row.Source) < 20 {
			t.Errorf("row %d: %+v: want its shape, a name and a source", i, row)
		}
		if row.Shape.String() != row.Name {
			t.Errorf("row %d: String() = %q, want %q", i, row.Shape.String(), row.Name)
		}
		perStatement := row.Shape == policy.ShapeWriteError || row.Shape == policy.ShapeWriteErrorUnproven || row.Shape == policy.ShapeWriteErrorMulti
		if !perStatement && (row.Others != row.Failed || row.Tail != row.Failed) {
			t.Errorf("row %s: a whole-command shape proves the same for every document", row.Name)
		}
	}
	if r := policy.ShapeWriteError.Row(); r.Failed != policy.NotApplied || r.Tail != policy.NotApplied {
		t.Errorf("write_error: %+v, want the statement and an ordered tail not applied", r)
	}
	if r := policy.ShapeWriteErrorUnproven.Row(); r.Failed != policy.MaybeApplied || r.Tail != policy.MaybeApplied || r.Others != policy.Applied {
		t.Errorf("write_error_unproven: %+v, want the statement and an ordered tail maybe applied, the others applied", r)
	}
	if r := policy.ShapeWriteErrorMulti.Row(); r.Failed != policy.MaybeApplied || r.Tail != policy.NotApplied || r.Others != policy.Applied {
		t.Errorf("write_error_multi: %+v, want the statement maybe applied, an ordered tail not executed, the others applied", r)
	}
}

// A write error proves what its code proves: only the listed verdict codes
// prove their statement not applied; mongos's "Write results unavailable"
// (6), an interruption (11602), a time limit (50), and every code not
// listed prove nothing.
func TestWriteErrorProvesWhatItsCodeProves(t *testing.T) {
	cases := []struct {
		code  int32
		shape policy.Shape
	}{
		{121, policy.ShapeWriteError}, {11000, policy.ShapeWriteError}, {11001, policy.ShapeWriteError},
		{12582, policy.ShapeWriteError}, {2, policy.ShapeWriteError}, {10334, policy.ShapeWriteError},
		{17280, policy.ShapeWriteError}, {16755, policy.ShapeWriteError}, {14, policy.ShapeWriteError},
		{16500, policy.ShapeWriteError},
		{6, policy.ShapeWriteErrorUnproven}, {7, policy.ShapeWriteErrorUnproven}, {50, policy.ShapeWriteErrorUnproven},
		{83, policy.ShapeWriteErrorUnproven}, {89, policy.ShapeWriteErrorUnproven}, {91, policy.ShapeWriteErrorUnproven},
		{189, policy.ShapeWriteErrorUnproven}, {262, policy.ShapeWriteErrorUnproven}, {9001, policy.ShapeWriteErrorUnproven},
		{10107, policy.ShapeWriteErrorUnproven}, {11600, policy.ShapeWriteErrorUnproven}, {11602, policy.ShapeWriteErrorUnproven},
		{13435, policy.ShapeWriteErrorUnproven}, {13436, policy.ShapeWriteErrorUnproven}, {424242, policy.ShapeWriteErrorUnproven},
	}
	for _, c := range cases {
		js := fmt.Sprintf(`{"ok":1,"n":1,"writeErrors":[{"index":1,"code":%d,"errmsg":"Write results unavailable from shard01 :: caused by :: Connection reset by peer"}]}`, c.code)
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(js), false, &raw); err != nil {
			t.Fatal(err)
		}
		fs := policy.Extract(mocks.ReplyError(mocks.OpInsertMany, raw))
		if len(fs) != 1 || fs[0].Shape != c.shape || fs[0].Index != 1 {
			t.Errorf("code %d: %+v, want one failure of shape %s at index 1", c.code, fs, c.shape)
			continue
		}
		if want := c.shape == policy.ShapeWriteErrorUnproven; fs[0].Ambiguous != want || (fs[0].Proof() == policy.MaybeApplied) != want {
			t.Errorf("code %d: proof %s ambiguous %v", c.code, fs[0].Proof(), fs[0].Ambiguous)
		}
	}
	// mongos's 16460 wrapping a shard's E11000 is a duplicate key.
	var raw bson.Raw
	_ = bson.UnmarshalExtJSON([]byte(`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":16460,"errmsg":"error inserting 1 documents to shard s1 :: caused by :: E11000 duplicate key error"}]}`), false, &raw)
	if fs := policy.Extract(mocks.ReplyError(mocks.OpInsertMany, raw)); len(fs) != 1 || fs[0].Shape != policy.ShapeWriteError {
		t.Errorf("16460 with E11000: %+v, want a verdict", fs)
	}
}
