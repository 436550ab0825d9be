package engine

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
)

// Send makes one attempt: it sends batch (the documents still pending, in
// input order) to the driver and returns the driver's result and error;
// ErrUnacked, with the result, when the driver reports the write
// unacknowledged.
type Send func(ctx context.Context, batch Batch) (any, error)

// Batch is the documents of one attempt.
type Batch []*item

// Doc returns the i-th document as prepared for the driver (inserts): a
// bson.Marshaler over its prepared bytes (see sendDoc).
func (b Batch) Doc(i int) any { return sendDoc{&b[i].doc} }

// sendDoc is how an insert's prepared document is handed to the driver: a
// bson.Marshaler whose MarshalBSON returns the item's bytes. It is one
// pointer wide, so it sits in an interface without a heap box (a bson.Raw
// is a slice header: boxing it allocates 24 bytes per document), and the
// driver's Encoder.Encode takes its Marshaler branch, which copies the
// bytes once, without the second box rawEncodeValue makes through
// reflect.Value.Interface (driver v2.10 bson/encoder.go,
// bson/primitive_codecs.go).
type sendDoc struct{ doc *bson.Raw }

// MarshalBSON returns the prepared bytes (not a copy; the driver copies
// them into its command).
func (d sendDoc) MarshalBSON() ([]byte, error) { return *d.doc, nil }

// Model returns the i-th write model to send (BulkWrite).
func (b Batch) Model(i int) mongo.WriteModel { return b[i].sendModel() }

// Index returns the i-th document's position in the caller's input.
func (b Batch) Index(i int) int { return b[i].index }

// Spec is one guarded call as the root describes it to the engine: what
// the call is (Name), its inputs, how the caller marked them, and how one
// attempt reaches the driver. The root builds one literal per call and
// hands it to Run, which is the engine's only entry for a call outside a
// transaction.
type Spec struct {
	// Name is the guarded method: insertOne, insertMany, bulkWrite,
	// updateOne, ... (hooks.Operation.Name, Report.Operation).
	Name string
	// Inputs are the call's inputs, checked as the driver checks them.
	Inputs Inputs
	// Idempotent marks every non-insert model safe to re-send after an
	// ambiguous failure (writeguard.WithIdempotent); IdempotentModels marks
	// the inputs at these indexes only (writeguard.IdempotentModels;
	// indexes out of range are ignored). An insert is idempotent by its
	// _id whatever they say.
	Idempotent       bool
	IdempotentModels []int
	// NeverResend takes back every idempotence mark: a write that may have
	// been applied is not sent again, whatever the caller marked (the root
	// sets it for findAndModify, whose result, the document before or after
	// the write, a second run cannot give back).
	NeverResend bool
	// MaybeApplied are the indexes of inputs an earlier call may have
	// applied (writeguard's Remaining.Context): they start with the
	// evidence "maybe applied", as if an earlier attempt of this call had
	// sent them, so that a duplicate key on an insert's own _id is read
	// back. Indexes out of range are ignored.
	MaybeApplied []int
	// MatchedNothing, when not nil, reads the driver's result of an
	// attempt that succeeded and reports whether it matched no document
	// (a method of one write: an update or delete that matched nothing, a
	// findOneAnd… that found nothing); the OperationFinished hook reports
	// it (hooks.OperationEnd.MatchedNothing) when the input ended written.
	MatchedNothing func(result any) bool
	// Send makes one attempt.
	Send Send
}

// Inputs are the inputs of one call: Docs for insertOne and insertMany,
// Models for every other method (exactly one of them is set, non-empty).
type Inputs struct {
	// Ordered is the call's ordered option (driver default: true; Ordered
	// reads it).
	Ordered bool
	// Docs are the documents of an insert call: input i is Docs[i]. The
	// call takes them over and clears each entry once it is prepared
	// (prepareAhead), unless DocsShared says they are the caller's own
	// slice, which the call only reads (the caller holds its values to
	// the end of the call anyway).
	Docs       []any
	DocsShared bool
	// Models are the write models of any other call: input i is
	// Models[i]. Each must pass CheckModels.
	Models []mongo.WriteModel
	// Command names the command kinds for the hooks
	// (hooks.Operation.Command; hooks.BulkCommand for a bulk write); ""
	// for an insert call.
	Command string
	// CallOptions are the call's options that an envelope keeps (let,
	// bypassDocumentValidation, ordered, comment).
	CallOptions envelope.CallOptions
}

// Run drives every input of the call s describes to its terminal
// disposition, sending each attempt with s.Send. It returns what the call
// proved (Result; read it after Run returns) and nil or Config.Report's
// error. Result.First is the driver's result of a first attempt that wrote
// every input, which the root returns as it is.
func (e *Engine) Run(ctx context.Context, s Spec) (Result, error) {
	in := s.Inputs
	c := e.newCall(s.Name, in.Ordered, len(in.Docs)+len(in.Models))
	c.op.Command, c.callOpts, c.idempotent, c.send = in.Command, in.CallOptions, s.Idempotent, s.Send
	if in.Docs != nil {
		c.takeDocs(in.Docs, in.DocsShared)
	} else if err := c.prepareModels(in.Models); err != nil {
		panic("writeguard engine: Inputs.Models not checked (CheckModels): " + err.Error())
	}
	c.markIdempotent(s.IdempotentModels)
	c.markMaybeApplied(s.MaybeApplied)
	c.ext.matched = s.MatchedNothing
	if s.NeverResend {
		c.neverResend()
	}
	err := c.run(ctx)
	c.leaveLimit() // limitcall.go
	return Result{c}, err
}

// newCall starts a call of operation name (insertOne, insertMany,
// bulkWrite, ...) over n inputs: one item each.
func (e *Engine) newCall(name string, ordered bool, n int) *Call {
	c := &Call{
		e:       e,
		ordered: ordered,
		next:    n, // takeDocs sets it back to 0
		opv:     hooks.Operation{Name: name, Database: e.cfg.Database, Collection: e.cfg.Collection, Ordered: ordered},
	}
	c.op = &c.opv
	slab := make([]item, n)
	c.items = make([]*item, n)
	for i := range slab {
		slab[i].index = i
		c.items[i] = &slab[i]
	}
	return c
}

// Call is the state of one guarded call: made by Run from its Spec, then
// run once (loop.go). Not safe for concurrent use.
type Call struct {
	e          *Engine
	op         *hooks.Operation // &opv: what the hooks are given
	opv        hooks.Operation
	ctx        context.Context // the operation context (hooks)
	ordered    bool
	idempotent bool
	callOpts   envelope.CallOptions // the call's options an envelope keeps
	items      []*item
	send       Send
	first      any // the driver's result of a first attempt that wrote every input (run)
	// Insert calls prepare their documents as they go (prepareAhead):
	// items[:next] are prepared, inputs[next:] wait; enc is the call's
	// encoder meanwhile; spread is set when they took more than one step,
	// and then a stored document's _id is copied into ids (keepID) so that
	// its prepared bytes can go.
	inputs       []any
	inputsShared bool // inputs is the caller's slice (Inputs.DocsShared): never cleared
	next         int
	enc          *docEncoder
	spread       bool
	ids          []byte

	start    time.Time
	attempts int
	retries  int
	lastErr  error
	hint     string
	extra    []error
	parked   []*item // invalid items waiting for the dead-letter sink
	// copies counts, per fingerprint, the identical inputs of this call
	// handed to the sink so far (collapse, deadletter.go).
	copies map[string]int
	window int        // ordered: documents per attempt (0: all pending)
	stops  int        // ordered: passes that stopped at a rejected document (window.go)
	offset int        // position of the current command's first statement in its pass
	oneCmd [1][]*item // commands' answer for a batch of one statement, kept in the call
	lim    Limits     // the server's limits, once asked (limAsked; commands.go)
	// limAsked: lim holds the server's limits (asked once per call).
	limAsked bool
	// noUniqueID: _id is not unique where the documents land (asked of
	// Config.UniqueID once, when an insert may have been applied).
	noUniqueID, uniqueAsked bool
	panics                  hookPanics // the hooks' recovered panics (panic.go), until finish
	stopped                 bool       // the call is ended (giveUp: configuration, context): no further command is sent
	// retrying: an item moved to retrying since scheduleRetry last ran
	// (toRetrying); unhandled: items settled neither handled nor stored
	// (settle), which stopOrdered looks for. They spare a clean pass two
	// walks over every item.
	retrying  bool
	unhandled int
	// settled: items settled (settle; each once); notOK: of them, those
	// neither written, already written nor an allowed unacknowledged
	// write (finish); anyPrefailed: a document failed to prepare
	// (routePrefailed has something to route).
	settled, notOK int
	anyPrefailed   bool
	stopAt         int     // ordered: batch position of the last attempt's first write error, -1 when none
	ext            callExt // per-model idempotence, one-statement rule, bisection (statement.go, bisect.go)
}
