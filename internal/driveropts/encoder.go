package driveropts

import (
	"io"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Encoder returns the constructor of a bson.Encoder on w configured as the
// driver configures the one it marshals documents with for a collection
// with registry reg and BSON options opts (mongo/mongo.go getEncoder,
// driver v2.10): every encoder option opts sets, then reg (nil: the
// default registry, no options). It returns nil when both are nil: the
// default encoder.
func Encoder(reg *bson.Registry, opts *options.BSONOptions) func(w io.Writer) *bson.Encoder {
	if reg == nil && opts == nil {
		return nil
	}
	return func(w io.Writer) *bson.Encoder {
		enc := bson.NewEncoder(bson.NewDocumentWriter(w))
		if opts != nil {
			for _, o := range []struct {
				set   bool
				apply func()
			}{
				{opts.ErrorOnInlineDuplicates, enc.ErrorOnInlineDuplicates},
				{opts.IntMinSize, enc.IntMinSize},
				{opts.NilByteSliceAsEmpty, enc.NilByteSliceAsEmpty},
				{opts.NilMapAsEmpty, enc.NilMapAsEmpty},
				{opts.NilSliceAsEmpty, enc.NilSliceAsEmpty},
				{opts.OmitZeroStruct, enc.OmitZeroStruct},
				{opts.OmitEmpty, enc.OmitEmpty},
				{opts.StringifyMapKeysWithFmt, enc.StringifyMapKeysWithFmt},
				{opts.UseJSONStructTags, enc.UseJSONStructTags},
			} {
				if o.set {
					o.apply()
				}
			}
		}
		if reg != nil {
			enc.SetRegistry(reg)
		}
		return enc
	}
}
