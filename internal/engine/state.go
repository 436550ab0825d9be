package engine

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

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
// Its one-byte fields sit together (208 bytes, where the order of the
// fields' meaning took 240): a call holds one per input to its end.
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
	model      mongo.WriteModel
	send       mongo.WriteModel // bulk: the model to send
	size       int              // bytes in its command (statementSize; 0: not measured yet)
	disp       policy.Disposition
	fail       *policy.Failure
	attempts   int // attempts that sent it to the server
	tries      int // attempts counted against its limit (not an ordered write's unexecuted tail, not a checkout failure)
	upsertRuns int
	err        error
	keywords   []string
}

// idValue is the _id as the driver returns it (policy.IDValue).
func (it *item) idValue() any { return policy.IDValue(it.id) }

// mayBeApplied reports whether an attempt may have applied it.
func (it *item) mayBeApplied() bool { return it.ev != noEvidence }
