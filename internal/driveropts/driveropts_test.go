package driveropts_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/internal/driveropts"
)

type failing struct{}

func (failing) List() []func(*options.InsertManyOptions) error {
	return []func(*options.InsertManyOptions) error{func(*options.InsertManyOptions) error { return errors.New("bad option") }}
}

func TestApply(t *testing.T) {
	var typedNil *options.InsertManyOptionsBuilder
	var o options.InsertManyOptions
	err := driveropts.Apply([]options.Lister[options.InsertManyOptions]{nil, typedNil, options.InsertMany().SetOrdered(false)}, &o)
	if err != nil || o.Ordered == nil || *o.Ordered {
		t.Fatalf("err %v, ordered %v: want the builder applied and the nil ones skipped", err, o.Ordered)
	}
	if err := driveropts.Apply([]options.Lister[options.InsertManyOptions]{failing{}}, &o); err == nil || err.Error() != "bad option" {
		t.Errorf("err %v, want the setter's error", err)
	}
}
