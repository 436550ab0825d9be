package engine

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
// the bisection (isolated, sent after the others: an unordered write
// sends the rest first, and their success proves the server healthy,
// after which the lone document's next rejection is its verdict). If the
// next command fails too while nothing was executed, the server refused
// every command: the call stops bisecting for good (refused), and each
// document ends as Route says of a whole-command failure (an Invalid or
// Conflict class there is Unknown: failed, not_retried, MaybeWritten
// false since the command was refused), never dead-lettered as invalid.
// The cost is bounded: the narrowing's log2(n)+1 commands, the rest once,
// the lone document once more.

// healthSince reports whether the server executed a command of this
// Guarded (Engine.health) since the bisection last lacked that evidence.
func (c *Call) healthSince() bool { return c.e.health.Load() > c.ext.bis.healthAt }

// loneVerdict reports whether the whole-command failure of batch may be
// read as its one statement's verdict (oneStatement): always, unless
// batch is one document the bisection sent alone (a half of one, or an
// isolated document) or the call found every command refused, while the
// server has executed nothing since the bisection started. The first such
// rejection is recorded (doubtAt).
func (c *Call) loneVerdict(batch []*item) bool {
	b := &c.ext.bis
	if len(batch) != 1 || c.healthSince() {
		return true
	}
	if !b.refused && !b.sentHalf && !b.isolated[batch[0]] {
		return true
	}
	if b.doubtAt == 0 {
		b.doubtAt = c.attempts
	}
	return false
}

// refusedAll reports whether the server has refused every command since
// the bisection started, an unproven lone rejection (doubtAt) and a later
// command included; the first time, it ends the call's bisection for
// good: no half, no isolated document, no new start.
func (c *Call) refusedAll() bool {
	b := &c.ext.bis
	if b.refused {
		return true
	}
	if b.doubtAt == 0 || c.attempts <= b.doubtAt || c.healthSince() {
		return false
	}
	b.refused, b.active, b.sentHalf, b.verify, b.isolated, b.left = true, false, false, nil, nil, 0
	return true
}
