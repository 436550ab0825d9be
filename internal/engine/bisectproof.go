package engine

import "github.com/writeguard/writeguard/policy"

// What a bisection must see before a lone rejection is a verdict (B2 of
// the first-time user's trial).
//
// A command of one statement rejected as a whole for a per-document
// reason (2 BadValue, 14 TypeMismatch, 10334, ...) is read as that
// statement's verdict (oneStatement). When a bisection sent it (a half of
// one document, or a document it isolated), that reading holds only if
// the server has shown, since the bisection started, that it accepts
// other commands of this Guarded: Engine.health moved past
// bisection.healthAt (a sibling half was executed, another batch or
// another call was). A server that refuses every command as a whole
// rejects the lone document as it rejected its batch, which proves
// nothing about that document (README "What a reply proves": a
// whole-command failure is never a verdict on the documents).
//
// So the first unproven lone rejection (doubtAt) keeps its document for
// the bisection (doubted, isolated, sent after the others: an unordered
// write sends the rest first; an ordered one, when the doubted document
// is first, the documents after it: probe). The execution of any of them
// proves the server healthy, and the doubted document gets the verdict
// of its lone rejection without another command (convict). If the others
// fail too, they are narrowed down in turn (they may hold a poison of
// their own); if that narrowing also ends at a lone document while
// nothing was executed, the server refused every command (doubts: 2):
// the call stops bisecting for good (refused), and each
// document ends as Route says of a whole-command failure (an Invalid or
// Conflict class there is Unknown: failed, not_retried, MaybeWritten
// false since the command was refused), never dead-lettered as invalid.
// The cost is bounded: two narrowings of log2(n)+1 commands, the others
// once, and, when they fail too, what is left once more and the doubted
// document once more.

// healthSince reports whether the server executed a command of this
// Guarded (Engine.health) since the bisection last lacked that evidence.
func (c *Call) healthSince() bool { return c.e.health.Load() > c.ext.bis.healthAt }

// loneVerdict reports whether whole, the whole-command failure of batch,
// may be read as its one statement's verdict (oneStatement): always,
// unless it is a rejection oneStatement would read so (a command
// rejection of class Invalid or Conflict) of one document the bisection
// sent alone (a half of one, or an isolated document), or of any lone
// document while one is doubted or once the call found every command
// refused, while the server
// has executed nothing since the bisection started. The first such
// rejection is recorded (doubtAt, doubted).
func (c *Call) loneVerdict(batch []*item, whole *policy.Failure) bool {
	b := &c.ext.bis
	if len(batch) != 1 || c.healthSince() || whole.Shape != policy.ShapeCommandRejected {
		return true
	}
	if cl := c.e.cfg.Classifier.Classify(*whole); cl != policy.Invalid && cl != policy.Conflict {
		return true
	}
	if !b.refused && b.doubted == nil && !b.sentHalf && !b.isolated[batch[0]] {
		return true
	}
	if b.doubtAt == 0 {
		b.doubtAt = c.attempts
	}
	if c.attempts != b.lastDoubt {
		b.doubts, b.lastDoubt = b.doubts+1, c.attempts
	}
	if !b.refused && b.doubted == nil {
		b.doubted = batch[0]
	}
	return false
}

// probe returns the documents an ordered write sends when its first
// waiting document is the doubted one (its lone rejection unproven):
// those after it in the window, whose execution proves the server
// healthy and convicts it (convict). Only when its verdict will be
// handled (Invalid, with a sink: parked, as any dead-lettered document
// of an ordered write is before the documents after it are written);
// otherwise it goes alone again, and its rejection, still unproven, ends
// the bisection (refusedAll).
func (c *Call) probe(batch []*item) ([]*item, bool) {
	b := &c.ext.bis
	d := b.doubted
	if !c.ordered || d == nil || b.refused || len(batch) < 2 || batch[0] != d || c.e.cfg.Sink == nil || d.class != policy.Invalid {
		return nil, false
	}
	return batch[1:], true
}

// convict gives the doubted document the verdict of its lone rejection
// (what oneStatement and Route make of it: dead-lettered, or the conflict
// handler) once the server has executed a command since the bisection
// started: it was refused alone while the server accepted others.
func (c *Call) convict() {
	b := &c.ext.bis
	d := b.doubted
	if d == nil || b.refused || !c.healthSince() {
		return
	}
	b.doubted = nil
	if !d.live() || d.fail == nil || d.fail.Shape != policy.ShapeCommandRejected {
		return
	}
	if d.state == retrying {
		d.to(pending)
	}
	f := *d.fail
	var td todo
	c.apply(d, c.decide(c.ctx, d, verdict{fail: &f, proof: policy.NotApplied, sent: true}), &td)
	c.carryOut(c.ctx, &td, "", nil)
}

// refusedAll reports whether the server has refused every command since
// the bisection started, two lone documents included (doubts: the doubted
// one, and another the narrowing of the others found, or the doubted one
// sent alone again); the first time, it ends the call's bisection for
// good: no half, no isolated document, no new start.
func (c *Call) refusedAll() bool {
	b := &c.ext.bis
	if b.refused {
		return true
	}
	if b.doubts < 2 || c.healthSince() {
		return false
	}
	b.refused, b.active, b.sentHalf, b.verify, b.isolated, b.left = true, false, false, nil, nil, 0
	return true
}
