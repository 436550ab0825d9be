// Package driveropts applies a driver call's option builders the way the
// driver does, for every package of the module that reads them (the
// engine, the envelope's call options, the test doubles): one rule for nil
// builders; and it configures an encoder as the driver configures a
// collection's (Encoder).
package driveropts

import (
	"reflect"

	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Apply applies opts to o in order, as the driver does
// (x/mongo/driver/mongoutil.NewOptions): a nil builder, or a typed nil
// pointer to one, is skipped. The error is the first a builder's setter
// returns, unwrapped.
func Apply[T any](opts []options.Lister[T], o *T) error {
	for _, l := range opts {
		if l == nil {
			continue
		}
		if v := reflect.ValueOf(l); v.Kind() == reflect.Pointer && v.IsNil() {
			continue
		}
		for _, set := range l.List() {
			if err := set(o); err != nil {
				return err
			}
		}
	}
	return nil
}
