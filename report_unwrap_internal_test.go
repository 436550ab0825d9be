package writeguard

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// sameError tells copies of one error value from other values, for every
// shape the driver returns, and never panics on an uncomparable one.
func TestSameError(t *testing.T) {
	bwe := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Code: 11000}}}, Labels: []string{"x"}}
	bwe2 := mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Code: 11000}}}, Labels: []string{"x"}}
	we := mongo.WriteException{WriteErrors: mongo.WriteErrors{{Code: 11000}}}
	we2 := mongo.WriteException{WriteErrors: mongo.WriteErrors{{Code: 11000}}}
	ce := mongo.CommandError{Code: 6, Labels: []string{"NetworkError"}, Wrapped: bwe}
	ce2 := mongo.CommandError{Code: 6, Labels: []string{"NetworkError"}, Wrapped: bwe2}
	wrapped := fmt.Errorf("w: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name string
		a, b error
		same bool
	}{
		{"bulk copy", bwe, error(bwe), true},
		{"bulk equal, other memory", bwe, bwe2, false},
		{"write copy", we, error(we), true},
		{"write other", we, we2, false},
		{"command copy (uncomparable Wrapped)", ce, error(ce), true},
		{"command other", ce, ce2, false},
		{"types differ", bwe, we, false},
		{"pointer same", wrapped, wrapped, true},
		{"pointer other", wrapped, fmt.Errorf("w: %w", context.DeadlineExceeded), false},
		{"sentinel", context.Canceled, context.Canceled, true},
		{"sentinels differ", context.Canceled, errors.New("context canceled"), false},
	} {
		if got := sameError(tc.a, tc.b); got != tc.same {
			t.Errorf("%s: sameError = %v, want %v", tc.name, got, tc.same)
		}
	}
}
