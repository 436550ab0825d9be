// Package jsonschema is the old home of the $jsonSchema validator emulation,
// kept so that code importing this path still compiles.
//
// Deprecated: the evaluator is product code (the writeguard command's
// replay checks documents with it) and lives in
// github.com/writeguard/writeguard/jsonschema; import that package. Every
// name here is an alias of the name there.
package jsonschema

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
)

// Validator is jsonschema.Validator.
//
// Deprecated: use github.com/writeguard/writeguard/jsonschema.Validator.
type Validator = jsonschema.Validator

// ErrUnsupported is jsonschema.ErrUnsupported.
//
// Deprecated: use github.com/writeguard/writeguard/jsonschema.ErrUnsupported.
var ErrUnsupported = jsonschema.ErrUnsupported

// Compile calls jsonschema.Compile.
//
// Deprecated: use github.com/writeguard/writeguard/jsonschema.Compile.
func Compile(validator any) (*Validator, error) { return jsonschema.Compile(validator) }

// Unsupported calls jsonschema.Unsupported.
//
// Deprecated: use github.com/writeguard/writeguard/jsonschema.Unsupported.
func Unsupported(validator any) ([]string, error) { return jsonschema.Unsupported(validator) }

// WithID calls jsonschema.WithID.
//
// Deprecated: use github.com/writeguard/writeguard/jsonschema.WithID.
func WithID(doc bson.D) bson.D { return jsonschema.WithID(doc) }
