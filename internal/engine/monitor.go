package engine

import (
	"context"
	"errors"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/writeguard/writeguard/policy"
)

// Evidence from the wire. The caller installs writeguard's command monitor
// on its client (the root's Monitor); the engine tags each attempt's
// context with a wire record (wrapSend), and the monitor's finished
// events land in it (WireSucceeded, WireFailed). An event describes
// exactly one attempt of the driver call, so its proof is its row's
// Failed proof, never a guess about hidden ones. Started events are not
// read: the driver publishes Started before its last context check
// (x/mongo/driver/operation.go 789 before 818), so it proves nothing,
// and a Started callback makes the driver copy every command.

// wireKey is the context key of an attempt's wire record.
type wireKey struct{}

// wireEvent is what one finished event proved about the statements of
// its command.
type wireEvent struct {
	requestID    int64
	connectionID string
	sent         bool           // a reply, or an error other than a pre-send one
	overload     bool           // an error labelled SystemOverloadedError (limitcall.go)
	proofs       []policy.Proof // per statement (nil: whole: every statement has whole)
	whole        policy.Proof
}

// wire is one attempt's record of finished events.
type wire struct {
	mu      sync.Mutex
	n       int // statements of the attempt's command
	ordered bool
	events  []wireEvent
	buf     [2]wireEvent // events' first backing array: most attempts have one or two
}

// reset empties w before an attempt.
func (w *wire) reset() {
	w.mu.Lock()
	if w.events == nil {
		w.events = w.buf[:0]
	}
	w.events = w.events[:0]
	w.mu.Unlock()
}

// tagWire returns ctx carrying w, set for an attempt of n statements.
func tagWire(ctx context.Context, w *wire, n int, ordered bool) context.Context {
	w.mu.Lock()
	w.n, w.ordered = n, ordered
	w.mu.Unlock()
	return context.WithValue(ctx, wireKey{}, w)
}

func wireFrom(ctx context.Context) *wire {
	w, _ := ctx.Value(wireKey{}).(*wire)
	return w
}

// WireSucceeded records a succeeded command event in the wire record of
// the attempt ctx belongs to (nothing when ctx carries none: a command
// writeguard did not send, or a read-back). A succeeded event carries
// the server's reply: the command was sent and run; each statement is
// proved by its write error, the write concern error or the reply's
// acknowledgement (policy.Extract on the reply's shape). The driver
// publishes a reply with writeErrors as a succeeded event
// (x/mongo/driver/operation.go finishedInformation.success).
func WireSucceeded(ctx context.Context, ev *event.CommandSucceededEvent) {
	w := wireFrom(ctx)
	if w == nil || ev == nil || !writeCommand(ev.CommandName) {
		return
	}
	w.add(wireEvent{requestID: ev.RequestID, connectionID: ev.ConnectionID, sent: true}, ev.Reply, nil)
}

// WireFailed records a failed command event: a pre-send error (the
// context or ErrDeadlineWouldBeExceeded checked just before the send,
// operation.go 818-822, published as a failed event at 844) proves the
// command not sent on that attempt; any other (a network error, an ok: 0
// reply) proves what its shape's row says (policy.ReplyShapes, Failed).
func WireFailed(ctx context.Context, ev *event.CommandFailedEvent) {
	w := wireFrom(ctx)
	if w == nil || ev == nil || !writeCommand(ev.CommandName) {
		return
	}
	e := wireEvent{requestID: ev.RequestID, connectionID: ev.ConnectionID, sent: !preSend(ev.Failure)}
	w.add(e, nil, ev.Failure)
}

// writeCommand reports whether name is a write command writeguard sends
// (insert, update, delete, findAndModify): the driver may run other
// commands on an attempt's context (client-side encryption's key vault
// find and listCollections, an authentication), whose events say nothing
// about the write.
func writeCommand(name string) bool {
	switch name {
	case "insert", "update", "delete", "findAndModify":
		return true
	}
	return false
}

// preSend reports the errors operation.go 818-822 sets before a roundTrip
// (ctx.Err(), ErrDeadlineWouldBeExceeded): no byte of that attempt left
// the client. A context error met during the roundTrip is wrapped as a
// driver.Error labelled NetworkError (operation.go networkError), so it
// is not one of them.
func preSend(err error) bool {
	if errors.Is(err, driver.ErrDeadlineWouldBeExceeded) {
		return true
	}
	var de driver.Error
	return !errors.As(err, &de) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// add records e, reading the proofs from reply (a succeeded event) or err.
func (w *wire) add(e wireEvent, reply bson.Raw, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, have := range w.events {
		if have.requestID == e.requestID && have.connectionID == e.connectionID {
			return // the same attempt told twice
		}
	}
	switch {
	case !e.sent:
		e.whole = policy.NotSent
	case err != nil:
		fs := policy.Extract(asMongoError(err))
		e.whole = wholeProof(fs)
		e.overload = overloaded(fs)
	default:
		e.proofs, e.whole = replyProofs(reply, w.n, w.ordered)
	}
	w.events = append(w.events, e)
}

// wholeProof is the proof of an event's error for every statement: the
// first whole-command failure's Failed proof, MaybeApplied when none.
func wholeProof(fs []policy.Failure) policy.Proof {
	for i := range fs {
		if fs[i].Index == policy.WholeCommand {
			return fs[i].Proof()
		}
	}
	return policy.MaybeApplied
}

// asMongoError turns the driver.Error a failed event carries into the
// mongo.CommandError the driver's API returns for it (mongo/errors.go
// wrapErrors), the shape policy.Extract reads; other errors are returned
// as they are.
func asMongoError(err error) error {
	var de driver.Error
	if !errors.As(err, &de) {
		return err
	}
	return mongo.CommandError{Code: de.Code, Message: de.Message, Labels: de.Labels, Name: de.Name, Wrapped: err, Raw: bson.Raw(de.Raw)}
}

// overloaded reports whether any of fs carries the SystemOverloadedError
// label (the driver retries such a reply itself: operation.go 859-877).
func overloaded(fs []policy.Failure) bool {
	for i := range fs {
		if fs[i].HasLabel(policy.LabelSystemOverloaded) {
			return true
		}
	}
	return false
}

// overloads returns how many of the attempt's finished events were
// replies labelled SystemOverloadedError.
func (w *wire) overloads() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.overload {
			n++
		}
	}
	return n
}
