package policy_test

import (
	"testing"

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
		if row.Shape != policy.ShapeWriteError && row.Others != row.Failed {
			t.Errorf("row %s: a whole-command shape proves the same for every document", row.Name)
		}
	}
}
