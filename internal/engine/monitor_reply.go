package engine

import (
	"context"
	"errors"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

// replyProofs reads the proof of each of the n statements of a command
// from its ok: 1 reply: a statement with a write error has its row's
// Failed proof (policy.ReplyShapes through policy.Extract), the ones
// after the first write error of an ordered command its Tail, the others
// Applied (AppliedUnconfirmed with a writeConcernError). A reply without
// write errors proves the same of every statement: nil proofs and that
// proof as whole (no allocation on the path of every success). A reply
// whose write error names no statement of the command (the driver split
// it, under client-side encryption) cannot be read: nil, MaybeApplied.
func replyProofs(reply bson.Raw, n int, ordered bool) ([]policy.Proof, policy.Proof) {
	others := policy.Applied
	if _, ok := reply.Lookup("writeConcernError").DocumentOK(); ok {
		others = policy.AppliedUnconfirmed
	}
	arr, ok := reply.Lookup("writeErrors").ArrayOK()
	if !ok {
		return nil, others
	}
	var bwe mongo.BulkWriteException
	vals, _ := arr.Values()
	for _, v := range vals {
		d, ok := v.DocumentOK()
		idx, _ := d.Lookup("index").AsInt64OK()
		if !ok || idx < 0 || int(idx) >= n {
			return nil, policy.MaybeApplied
		}
		code, _ := d.Lookup("code").AsInt64OK()
		msg, _ := d.Lookup("errmsg").StringValueOK()
		bwe.WriteErrors = append(bwe.WriteErrors, mongo.BulkWriteError{WriteError: mongo.WriteError{Index: int(idx), Code: int(code), Message: msg, Raw: d}})
	}
	if len(bwe.WriteErrors) == 0 {
		return nil, others
	}
	out := make([]policy.Proof, n)
	for i := range out {
		out[i] = others
	}
	first := n
	for _, f := range policy.Extract(bwe) {
		if f.Index < 0 {
			continue
		}
		out[f.Index] = f.Proof()
		first = min(first, f.Index)
	}
	if ordered {
		tail := policy.Extract(mongo.BulkWriteException{WriteErrors: bwe.WriteErrors[:1]})[0].Shape.Row().Tail
		for i := first + 1; i < n; i++ {
			out[i] = tail
		}
	}
	return out, others
}

// proofRank orders the proofs by what they say of the write, so that the
// union of several attempts keeps the strongest: applied, applied
// unconfirmed, maybe applied, not applied (sent, refused), not sent.
func proofRank(p policy.Proof) int {
	switch p {
	case policy.Applied:
		return 4
	case policy.AppliedUnconfirmed:
		return 3
	case policy.MaybeApplied:
		return 2
	case policy.NotApplied:
		return 1
	}
	return 0
}

// union returns, per statement, the strongest proof of the attempt's
// finished events (a statement applied by any attempt is applied), and
// the number of events; nil proofs when there were none (the monitor is
// not installed, or the driver sent nothing and published nothing: a
// checkout failure publishes no event). Missing events never prove
// "not sent": the caller falls back to the rules without the wire.
func (w *wire) union() ([]policy.Proof, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == 0 {
		return nil, 0
	}
	out := make([]policy.Proof, w.n)
	for i := range out {
		out[i] = policy.NotSent
	}
	for _, e := range w.events {
		for i := range out {
			p := e.whole
			if e.proofs != nil {
				p = e.proofs[i]
			}
			if proofRank(p) > proofRank(out[i]) {
				out[i] = p
			}
		}
	}
	return out, len(w.events)
}

// sentCommands returns how many of the attempt's finished events show a
// command sent (hooks.AttemptEnd.WireCommands).
func (w *wire) sentCommands() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.sent {
			n++
		}
	}
	return n
}

// noteWire checks, after an attempt, that the monitor is installed on the
// collection's client: an attempt that got a server reply (err nil, or a
// server's error) publishes a finished event before the driver returns
// (operation.go 844). With none tagged the monitor is not installed: the
// engine stops tagging attempts, and logs it once.
func (c *Call) noteWire(ctx context.Context, err error) {
	e := c.e
	if e.wire.absent.Load() {
		return
	}
	if _, n := c.ext.wire.union(); n > 0 {
		e.wire.seen.Store(true)
		return
	}
	if serverReplied(err) && !e.wire.seen.Load() && e.wire.absent.CompareAndSwap(false, true) {
		e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "writeguard: no writeguard.Monitor on this collection's client; "+
			"proofs assume the driver may have retried behind each call",
			slog.String("namespace", e.cfg.Namespace))
	}
}

// serverReplied reports whether err (nil: success) carries a server's
// reply.
func serverReplied(err error) bool {
	if err == nil {
		return true
	}
	var we mongo.WriteException
	var bwe mongo.BulkWriteException
	var ce mongo.CommandError
	switch {
	case errors.As(err, &we), errors.As(err, &bwe):
		return true
	case errors.As(err, &ce):
		return ce.Code != 0 && !ce.HasErrorLabel(policy.LabelNetworkError)
	}
	return false
}
