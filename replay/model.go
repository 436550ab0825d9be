package replay

import (
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
)

// modelOps are the "op" values of a non-insert model's envelope original
// before format 2 ({op, model}, model the canonical Extended JSON of
// {filter, update|replacement, upsert}); format 2 names the kind in
// envelope.Envelope.Kind and keeps every option (envelope.ModelDocument).
var modelOps = map[string]bool{"updateOne": true, "updateMany": true, "replaceOne": true, "deleteOne": true, "deleteMany": true}

// buildModel returns the write model replaying env: for a format-2
// envelope (Kind set) the model envelope.ParseModel rebuilds, every
// option of the original model included; for an older one, an insertOne
// of its original, or, for a bulkWrite envelope whose original describes
// an update, replace or delete model (it then has a string "op" among
// modelOps and no top-level _id, which an insert's original always has),
// that model. An envelope with withheld fields is sent only with the
// complete original supplied (WithWithheldValues). reason is non-empty
// when env is to be skipped.
func buildModel(env *envelope.Envelope, redacted bool) (m mongo.WriteModel, insert bool, reason string) {
	switch {
	case env.OriginalTruncated:
		return nil, false, "original truncated to fit 16 MiB: not replayable"
	case len(env.Withheld) > 0:
		return nil, false, withheldReason(env)
	case env.OriginalRedacted && !redacted:
		return nil, false, "original redacted by the sink (replay with WithRedacted to send it anyway)"
	case len(env.Original) == 0:
		return nil, false, "no original"
	}
	orig := env.Original
	if err := orig.Validate(); err != nil {
		return nil, false, "original is not valid BSON: " + err.Error()
	}
	if env.Kind != "" {
		if env.Kind == envelope.KindInsertOne {
			if _, err := orig.LookupErr("_id"); err != nil {
				return nil, false, "original has no _id (an insert would get a new one on every replay)"
			}
		}
		m, err := envelope.ParseModel(env.Kind, orig)
		if err != nil {
			return nil, false, err.Error()
		}
		return m, env.Kind == envelope.KindInsertOne, ""
	}
	if _, err := orig.LookupErr("_id"); err == nil {
		return mongo.NewInsertOneModel().SetDocument(orig), true, ""
	}
	opv, err := orig.LookupErr("op")
	op, isStr := opv.StringValueOK()
	if err != nil || !isStr || !modelOps[op] {
		return nil, false, "original has no _id (an insert would get a new one on every replay)"
	}
	parts, reason := modelParts(op, orig)
	if reason != "" {
		return nil, false, reason
	}
	m, reason = writeModel(op, parts)
	return m, false, reason
}

// withheldReason is the skip reason of an envelope with withheld fields.
func withheldReason(env *envelope.Envelope) string {
	paths := make([]string, len(env.Withheld))
	for i, w := range env.Withheld {
		paths[i] = w.Path + " (" + w.Reason + ")"
	}
	return "fields withheld from the dead-letter queue: " + strings.Join(paths, ", ") +
		"; supply the complete original to replay it (replay.WithWithheldValues)"
}

// modelParts returns the document holding a model's filter, update or
// replacement and upsert: writeguard stores them as canonical Extended
// JSON in "model" (they hold $-prefixed keys); older envelopes hold them
// as fields of the original itself.
func modelParts(op string, orig bson.Raw) (bson.Raw, string) {
	mv, err := orig.LookupErr("model")
	if err != nil {
		return orig, ""
	}
	js, ok := mv.StringValueOK()
	if !ok {
		return nil, op + " model whose model field is not Extended JSON text"
	}
	var parts bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(js), true, &parts); err != nil {
		return nil, op + " model whose Extended JSON does not parse: " + err.Error()
	}
	return parts, ""
}

// writeModel builds the op model from its parts.
func writeModel(op string, parts bson.Raw) (mongo.WriteModel, string) {
	filter, ok := docField(parts, "filter")
	if !ok {
		return nil, op + " model without a filter document"
	}
	upsert := false
	if v, err := parts.LookupErr("upsert"); err == nil {
		upsert, _ = v.BooleanOK()
	}
	switch op {
	case "updateOne", "updateMany":
		upd, reason := updateOf(op, parts)
		if reason != "" {
			return nil, reason
		}
		if op == "updateOne" {
			return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(upd).SetUpsert(upsert), ""
		}
		return mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(upd).SetUpsert(upsert), ""
	case "replaceOne":
		rep, ok := docField(parts, "replacement")
		if !ok {
			return nil, "replaceOne model without a replacement document"
		}
		return mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(rep).SetUpsert(upsert), ""
	case "deleteOne":
		return mongo.NewDeleteOneModel().SetFilter(filter), ""
	default: // deleteMany
		return mongo.NewDeleteManyModel().SetFilter(filter), ""
	}
}

// updateOf returns an update model's update: a document, or a pipeline
// (a list of stage documents).
func updateOf(op string, parts bson.Raw) (any, string) {
	v, err := parts.LookupErr("update")
	if err != nil {
		return nil, op + " model without an update"
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		return v.Document(), ""
	case bson.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			return nil, op + " model with an invalid pipeline"
		}
		stages := make([]bson.Raw, 0, len(vals))
		for _, s := range vals {
			d, ok := s.DocumentOK()
			if !ok {
				return nil, op + " model with a pipeline stage that is not a document"
			}
			stages = append(stages, d)
		}
		return stages, ""
	}
	return nil, op + " model whose update is not a document or pipeline"
}

func docField(doc bson.Raw, key string) (bson.Raw, bool) {
	v, err := doc.LookupErr(key)
	if err != nil {
		return nil, false
	}
	return v.DocumentOK()
}
