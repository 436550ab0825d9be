package engine

import (
	"errors"
	"fmt"

	"github.com/writeguard/writeguard/policy"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FailureKind names a failure by code, code name and shape, never by its
// message: "11000 DuplicateKey", "network_in_flight", "client: marshal
// error". Report.Error lists failures by it.
func FailureKind(f *policy.Failure) string {
	switch {
	case f.Origin == policy.OriginClient && f.Code == 0:
		return "client: " + clientErrorKind(f.Err)
	case f.Code == 0:
		return f.Shape.String()
	case f.CodeName == "":
		return fmt.Sprintf("%d %s", f.Code, f.Shape)
	}
	return fmt.Sprintf("%d %s", f.Code, f.CodeName)
}

// clientErrorKind names a client-side error without quoting it.
func clientErrorKind(err error) string {
	var me mongo.MarshalError
	switch {
	case errors.As(err, &me):
		return "marshal error"
	case errors.Is(err, mongo.ErrNilDocument):
		return "nil document"
	case errors.Is(err, ErrTooLarge):
		return "document over 16 MiB"
	case errors.Is(err, ErrInvalidBSON):
		return "invalid BSON"
	case errors.Is(err, mongo.ErrClientDisconnected):
		return "client disconnected"
	}
	return "error"
}
