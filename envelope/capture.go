package envelope

import (
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

// Capture is what a guarded write knows of one rejected document or
// model, from which New builds its envelope.
type Capture struct {
	// Document is an insert's document as marshalled for the write (with
	// its _id); ignored when Model is an update, replace or delete. An
	// InsertOneModel without it keeps its own document.
	Document bson.Raw
	// Model is the caller's write model, nil for InsertOne/InsertMany.
	Model mongo.WriteModel
	// DocumentID is the document's _id (inserts).
	DocumentID bson.RawValue
	// IDAssigned: writeguard assigned DocumentID.
	IDAssigned bool
	// Call is the guarded call's options (InsertOneCallOptions, ...).
	Call CallOptions
	// Failure is the server's verdict on the document (its errInfo, code,
	// codeName, errmsg and labels are kept); nil keeps none.
	Failure *policy.Failure
	// Namespace ("db.coll"), Operation (the call's name, as Envelope.Operation)
	// and BatchIndex (the index in the caller's batch) of the write.
	Namespace  string
	Operation  string
	BatchIndex int
	// Now is the capture time (first_seen and last_seen).
	Now time.Time
	// TraceID and SpanID of the write's span, if any.
	TraceID, SpanID string
	// Encoder makes the encoder of a model's values (filter, update,
	// replacement, ...), configured as the collection's (writeguard's
	// WithRegistry and WithBSONOptions), so that the original keeps what
	// the driver sent; nil: the default registry, as bson.Marshal.
	Encoder func(w io.Writer) *bson.Encoder
}

// New returns the envelope (format SchemaVersion) of a capture: Kind,
// Original (the insert's document, or ModelDocument of the model),
// CallOptions, the failure's fields, FailingKeywords and FailingPaths of
// its errInfo, and Fingerprint (SchemeCanonical; a sink replaces it when
// it withholds or redacts a field). A model that cannot be described (it
// does not marshal) gives an envelope whose original is {op: <its Go
// type>, marshal_error: <the error>}, which a replay skips: the failure is
// still recorded and nothing is silently dropped.
func New(c Capture) Envelope {
	kind, original := KindInsertOne, c.Document
	if c.Model != nil {
		if _, insert := c.Model.(*mongo.InsertOneModel); !insert || len(c.Document) == 0 {
			var err error
			if kind, original, err = modelDocument(c.Model, c.Encoder); err != nil {
				kind = ""
				original, _ = bson.Marshal(bson.D{{Key: "op", Value: fmt.Sprintf("%T", c.Model)}, {Key: "marshal_error", Value: err.Error()}})
			}
		}
	}
	idAssigned := c.IDAssigned && kind == KindInsertOne
	env := Envelope{
		SchemaVersion: SchemaVersion,
		Kind:          kind,
		Fingerprint:   Fingerprint(original, idAssigned),
		Original:      original,
		IDAssigned:    idAssigned,
		Namespace:     c.Namespace,
		Operation:     c.Operation,
		BatchIndex:    c.BatchIndex,
		FirstSeen:     c.Now,
		LastSeen:      c.Now,
		Attempts:      1,
		Status:        StatusPending,
		TraceID:       c.TraceID,
		SpanID:        c.SpanID,
	}
	env.DocumentID = c.DocumentID
	doc, err := c.Call.Document()
	if err != nil {
		// Kept, so that a replay refuses to send the write without them.
		doc, _ = bson.Marshal(bson.D{{Key: "marshal_error", Value: err.Error()}})
	}
	env.CallOptions = doc
	if f := c.Failure; f != nil {
		env.ErrInfo, env.Code, env.CodeName, env.ErrMsg, env.Labels = f.ErrInfo, f.Code, f.CodeName, f.Message, f.Labels
	}
	env.FailingKeywords = FailingKeywords(env.ErrInfo)
	env.FailingPaths = FailingPaths(env.ErrInfo)
	return env
}
