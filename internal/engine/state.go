package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// state is where one document is in its call's life cycle. Every change
// goes through item.to, which holds the only table of legal moves:
//
//	pending   --prepare failed--> prefailed
//	prefailed --park--> parked          (prepare failed, bytes to store)
//	prefailed --settle--> done          (prepare failed otherwise)
//	pending   --Route: Retry--> retrying
//	pending   --park--> parked          (Route: DeadLetter)
//	pending   --settle--> done
//	retrying  --next attempt--> pending (scheduleRetry waited the backoff)
//	retrying  --settle--> done          (GiveUp, read-back)
//	parked    --settle--> done          (the sink's Put: dead_lettered, dead_letter_failed)
//
// done is terminal: a second settle is ignored (the first disposition
// stands).
type state uint8

const (
	pending   state = iota // to be sent by the next attempt
	prefailed              // failed in prepare (marshal, size): never sent
	retrying               // to be sent again after the backoff, if allowed
	parked                 // invalid, waiting for the gathered dead-letter Put
	done                   // has its terminal disposition
)

func (s state) String() string {
	return [...]string{"pending", "prefailed", "retrying", "parked", "done"}[s]
}

// legal[from][to] lists the moves of the state diagram above.
var legal = [5][5]bool{
	prefailed: {parked: true, done: true},
	pending:   {prefailed: true, retrying: true, parked: true, done: true},
	retrying:  {pending: true, done: true},
	parked:    {done: true},
}

// toRetrying moves it to retrying, for scheduleRetry to find.
func (c *Call) toRetrying(it *item) {
	it.to(retrying)
	c.retrying = true
}

// to moves it to state s. A move the diagram does not have is a bug of
// the engine: it panics rather than report a disposition nobody decided.
func (it *item) to(s state) {
	if it.state == s {
		return
	}
	if !legal[it.state][s] {
		panic(fmt.Sprintf("writeguard engine: document %d moved from %s to %s", it.index, it.state, s))
	}
	it.state = s
}

// live reports whether it still waits for an attempt (pending or
// retrying).
func (it *item) live() bool { return it.state == pending || it.state == retrying }

// evidence is the strongest thing an attempt of the call proved the
// document may be: nothing, maybe applied, or applied with a write concern
// error. A read-back that finds another document under the _id clears it
// (our document is not stored).
type evidence uint8

const (
	noEvidence  evidence = iota
	maybe                // an attempt may have applied it (lost reply, interruption)
	unconfirmed          // an attempt applied it with a write concern error
)

// item is one input document or write model on its way through the call.
// Its one-byte fields sit together, and what only a bulk write's models
// or a failure path use is kept apart (rare): 136 bytes, where it took 208
// with them and 240 in the order of the fields' meaning. A call holds one
// per input to its end.
type item struct {
	index      int
	kind       Kind
	state      state
	ev         evidence
	idAssigned bool // writeguard gave the document its _id
	upsert     bool
	cmd        cmdKind // the server command it goes out in
	class      policy.Class
	reason     Reason        // why it ended unstored (set by giveUp, Route's settles)
	doc        bson.Raw      // insert: the prepared document; replace: the replacement
	id         bson.RawValue // insert: the _id
	size       int           // bytes in its command (statementSize; 0: not measured yet)
	disp       policy.Disposition
	fail       *policy.Failure
	attempts   int       // attempts that sent it to the server
	tries      int       // attempts counted against its limit (not an ordered write's unexecuted tail, not a checkout failure)
	rare       *itemRare // a bulk write's model, a failure path's details (nil until needed: more)
}

// itemRare is the part of an item that only a bulk write's models or a
// failure path use.
type itemRare struct {
	model      mongo.WriteModel
	send       mongo.WriteModel // bulk: the model to send
	upsertRuns int
	err        error    // Result.Err: why its read-back, sink or conflict handler failed
	keywords   []string // the failing keywords of its dead-letter envelope
}

// more returns it's rare part, made when first needed.
func (it *item) more() *itemRare {
	if it.rare == nil {
		it.rare = &itemRare{}
	}
	return it.rare
}

// The readers of the rare part: zero values when there is none.

func (it *item) model() mongo.WriteModel {
	if it.rare == nil {
		return nil
	}
	return it.rare.model
}

func (it *item) sendModel() mongo.WriteModel {
	if it.rare == nil {
		return nil
	}
	return it.rare.send
}

func (it *item) err() error {
	if it.rare == nil {
		return nil
	}
	return it.rare.err
}

func (it *item) keywords() []string {
	if it.rare == nil {
		return nil
	}
	return it.rare.keywords
}

func (it *item) upsertRuns() int {
	if it.rare == nil {
		return 0
	}
	return it.rare.upsertRuns
}

// idValue is the _id as the driver returns it (policy.IDValue).
func (it *item) idValue() any { return policy.IDValue(it.id) }

// mayBeApplied reports whether an attempt may have applied it.
func (it *item) mayBeApplied() bool { return it.ev != noEvidence }

// The document primitives every step of the loop calls: they move a
// document along the life cycle above (settle, apply, giveUp, stopOrdered)
// and let its bytes go once it is stored (release).

// todo collects the actions decided for the documents of one attempt that
// need more than a settle.
type todo struct {
	readBack, deadLetter, conflict []*item
	// readBackEnd: possibly applied inserts not retried, read back with
	// the fallback unknown (RuleReadBackStopping; route).
	readBackEnd []*item
}

// pending returns the items still to send, in input order.
func (c *Call) pending() []*item {
	if c.settled == c.next { // every prepared item is done (an item settles only once prepared)
		return nil
	}
	var out []*item
	for i, it := range c.items[:c.next] {
		if it.live() {
			if out == nil {
				out = make([]*item, 0, c.next-i) // one allocation, not one per doubling
			}
			out = append(out, it)
		}
	}
	return out
}

// settle gives it its terminal disposition and reports it. A statement
// that was sent is never not_attempted (C68): what its attempts proved
// decides instead, as GiveUp does (sentNotAttempted).
func (c *Call) settle(it *item, d policy.Disposition) {
	if it.state == done {
		return
	}
	if d == policy.NotAttempted && (it.attempts > 0 || it.mayBeApplied()) {
		d = sentNotAttempted(it)
	}
	it.disp = d
	it.to(done)
	c.settled++
	if d != policy.Written && d != policy.AlreadyWritten && !(d == policy.Unacknowledged && c.e.cfg.AllowUnacked) {
		c.notOK++ // finish: the call ends with its Report
		if !d.Handled() && !d.Stored() {
			c.unhandled++ // stopOrdered looks for the first of them
		}
	}
	if it.kind == KindInsert && (d == policy.Written || d == policy.AlreadyWritten) {
		c.release(it)
	}
	if !c.e.observed {
		return
	}
	ev := &hooks.Disposition{Op: c.op, Index: it.index, Disposition: d, Attempts: it.attempts, FailingKeywords: it.keywords()}
	if it.kind == KindInsert {
		ev.ID = it.idValue()
	}
	if it.fail != nil && d != policy.Written {
		ev.Failed = true
		ev.Class, ev.Code, ev.CodeName = it.class, it.fail.Code, it.fail.CodeName
	}
	c.e.hooks.Disposition(c.ctx, ev)
}

// sentNotAttempted is the disposition of a statement that was sent but
// was to end not_attempted: written_unconfirmed after a write concern
// error, unknown when an attempt may have applied it, else exhausted
// (every attempt proved it not applied).
func sentNotAttempted(it *item) policy.Disposition {
	switch {
	case it.ev == unconfirmed:
		return policy.WrittenUnconfirmed
	case it.mayBeApplied():
		return policy.OutcomeUnknown
	}
	return policy.Exhausted
}

// apply carries out one decision for it; actions that need I/O are
// collected in td.
func (c *Call) apply(it *item, d Decision, td *todo) {
	switch d.Action {
	case Settle:
		if d.Reason != ReasonNone {
			it.reason = d.Reason
		}
		c.settle(it, d.Disposition)
	case Retry:
		c.toRetrying(it)
		if d.Rule == RuleUpsertRace {
			it.more().upsertRuns++
		}
	case ReadBack:
		if d.Rule == RuleReadBackStopping {
			td.readBackEnd = append(td.readBackEnd, it)
			break
		}
		td.readBack = append(td.readBack, it)
	case DeadLetter:
		td.deadLetter = append(td.deadLetter, it)
	case HandleConflict:
		td.conflict = append(td.conflict, it)
	}
}

// carryOut runs the collected actions: read-backs first (a read-back can
// end in the conflict handler), then conflicts, then the dead-letter
// hand-off. fallback is the disposition of a possibly applied document
// whose read-back finds nothing or fails when the call stops retrying it
// ("" after a duplicate key: see policy.AfterReadBack).
func (c *Call) carryOut(ctx context.Context, td *todo, fallback policy.Disposition, others []*item) {
	c.readBackAll(ctx, td, fallback, others)
	for _, it := range td.conflict {
		if it.state == done || !c.conflictIdentifiable(it) {
			continue // done: settled by the read-back of others
		}
		c.handleConflict(ctx, it)
	}
	// A document of others that the read-back found stored is settled
	// (already_written) though its verdict in this attempt was to
	// dead-letter it: it is not parked (done cannot move to parked).
	park := td.deadLetter[:0]
	for _, it := range td.deadLetter {
		if it.state != done {
			park = append(park, it)
		}
	}
	c.park(ctx, park)
}

// stopOrdered ends an ordered write at its first unhandled document: the
// documents after it that are not done are given up (policy.GiveUp,
// StopOrdered: not_attempted), prepared first so that the Report has each
// one's _id and bytes; one that fails to prepare is given up as well,
// with that failure, since the write never reached it.
func (c *Call) stopOrdered(ctx context.Context) {
	if !c.ordered || c.unhandled == 0 {
		return
	}
	stop := -1
	for i, it := range c.items[:c.next] {
		if it.state == done && !it.disp.Handled() && !it.disp.Stored() {
			stop = i
			break
		}
	}
	if stop < 0 {
		return
	}
	c.prepareNext(ctx, true)
	var tail []*item
	for _, it := range c.items[stop+1:] {
		if it.live() || it.state == prefailed {
			tail = append(tail, it)
		}
	}
	c.giveUp(ctx, tail, StopOrdered)
}

// giveUp ends items that will not be sent again, as policy.GiveUp decides.
func (c *Call) giveUp(ctx context.Context, its []*item, why StopReason) {
	if why == StopConfiguration || why == StopContext {
		c.stopped = true // the call ends: no further command is sent (pass)
	}
	if len(its) == 0 {
		return
	}
	var td todo
	canRead := ctx.Err() == nil && !primaryGone(its) // limitcall.go
	fallback := ReadBackFallback()
	for _, it := range its {
		if !it.live() && it.state != prefailed {
			continue
		}
		it.reason = why.Reason()
		c.apply(it, GiveUp(GiveUpFacts{Reason: why, Kind: it.kind, Sent: it.attempts > 0,
			EverMaybe: it.mayBeApplied(), Unconfirmed: it.ev == unconfirmed, CanRead: canRead}), &td)
	}
	c.carryOut(ctx, &td, fallback, nil)
	for _, it := range its {
		if it.state != parked {
			c.settle(it, fallback) // a read-back that could not decide
		}
	}
}

// release lets the prepared bytes of a stored insert go: nothing reads
// them again (Outcome.Document is nil for written and already_written).
// Its _id stays, copied out of the arena when the call prepares its
// documents in several steps, so that the arena's chunks go with the
// documents they hold.
func (c *Call) release(it *item) {
	it.doc = nil
	if c.spread {
		it.id.Value = c.keepID(it.id.Value)
	}
}

// keepID copies v into the call's store of kept _ids (chunks of
// idChunk bytes) and returns the copy.
func (c *Call) keepID(v []byte) []byte {
	if cap(c.ids)-len(c.ids) < len(v) {
		c.ids = make([]byte, 0, max(len(v), idChunk))
	}
	start := len(c.ids)
	c.ids = append(c.ids, v...)
	return c.ids[start:len(c.ids):len(c.ids)]
}

// idChunk is the size of a chunk of kept _ids (16 KiB: about 1,300
// ObjectIDs).
const idChunk = 16 << 10

// rest prepares every document not prepared yet and returns the items
// still to send: what a call gives up when it stops as a whole.
func (c *Call) rest(ctx context.Context) []*item {
	c.prepareAhead(ctx, true)
	return c.pending()
}
