package engine

import (
	"math/bits"

	"github.com/writeguard/writeguard/policy"
)

// Narrowing down a poison document (CASES C66).
//
// A poison document makes every command that carries it fail as a whole
// (the server drops the connection, or rejects the command with a code
// that is a verdict on a document, such as 10334 BSONObjectTooLarge), so
// without help it sinks the good documents of its batch: they are re-sent
// with it until their attempts run out. The engine narrows such a batch
// down instead: it halves the suspect set, sends one half, and keeps the
// half that still fails (or, when the half sent was written, the other
// half), until one document is left. That document is then sent alone,
// always (it is isolated): its failure is now its own, and it earns the
// disposition of that failure (a per-document verdict on a command of one
// statement is dead-lettered: oneStatement, once the server has shown
// itself healthy since the bisection started: bisectproof.go; a failure that keeps
// recurring ends exhausted or unknown after its own attempts, read back
// first when it is an insert that may have been applied). The other
// documents are written without it.
//
// # Poison or outage
//
// A whole-command failure of a batch of two or more documents starts a
// bisection when it is deterministic (its class is a per-document verdict,
// policy.Invalid or policy.Conflict, though the command carried several
// statements), or when the call's previous attempt failed the same way
// (same FailureKind) on a batch of two or more while the server executed
// some other command of the same Guarded in between (another call, or
// another batch of this one): the same batch failing twice in a row while
// the server is otherwise healthy. Without that evidence a repeated
// failure is taken for an outage and retried as usual (an outage must not
// cost more commands than retries do: C22). Failures that say nothing
// about the documents never start one: nothing reached the server (policy.NotSent: checkout, server
// selection, context), the server asked to slow down (policy.Throttled),
// or it named a setting or a privilege (Configuration, Authorization
// shapes). Either way the server has shown itself healthy (it answered the
// command, or executed others), so after the retry that starts it (which
// waits its backoff as usual) the bisection's commands are sent without
// waiting.
//
// # Transient faults during the narrowing (CASES C72)
//
// A half's whole-command failure narrows the bisection only when it is of
// the poison's own kind (FailureKind of the failure that started it): a
// failure of another kind (a shutdown 91, a stepdown 10107, a write
// conflict 112, a throttle 462, a dropped connection while a size
// rejection is chased, nothing sent) says nothing about where the poison
// is, and the same half goes again after the backoff, its first such
// failure uncharged (maxResends; later ones are the documents' own tries:
// the normal retry path bounds them). A failure of the poison's kind may
// itself be transient (a dropped connection while a dropped connection is
// chased): unless that kind is deterministic, the document the narrowing
// leaves is sent alone before the others (verify); written, it shows the
// narrowing followed a transient failure, and the bisection starts over
// on what is left of its batch (restart, at most maxRestarts times). Only
// the statements the server executed leave the suspects: an ordered
// half's statements after its first write error stay. The failures that
// proved a poison (the batch's, and the earlier one of the same kind it
// repeats) are not charged to the good documents: they were the poison's
// commands.
//
// # Bounds and re-send rules
//
// Bisection commands are not charged to their documents' attempts (a
// whole-command failure of a batch is not a verdict on any one of its
// documents); they have their own bound: BisectBound(n) commands for a
// call of n inputs, and another BisectBound(n) for each document isolated
// or found and each start-over (so k poison documents cost about
// k·(log2(n)+1) commands). A half that settled a statement, and a failure
// of another kind, give their command back: the first is progress the
// number of documents bounds, the second is bounded by the documents'
// tries. When the bound is spent the call goes on with ordinary retries. Bisection only
// chooses which of the documents still waiting for an attempt are sent
// next; whether a document may be sent again at all is decided, as for any
// attempt, by Route and GiveUp: a model that may have been applied and is
// not idempotent is never re-sent. An ordered write stays ordered: the
// half sent is always a prefix of the waiting documents, so the documents
// before the poison one are written first, the poison one settles, and the
// rest follow the ordered rules (stopOrdered).

// BisectBound is the number of bisection commands a call of n inputs may
// make to isolate one document: ceil(log2(n)) + 1.
func BisectBound(n int) int {
	if n <= 1 {
		return 1
	}
	return bits.Len(uint(n-1)) + 1
}

// bisection is the bisection state of one call.
type bisection struct {
	active  bool
	suspect []*item // the documents the narrowing holds to hold a poison one
	root    []*item // the batch whose failure started the bisection: what a start over narrows again
	kind    string  // FailureKind of that failure: the poison's
	// deterministic: that failure cannot be transient (poisonSuspect)
	deterministic bool
	sentHalf      bool    // the last attempt sent a half of suspect
	resent        int     // failures of another kind of the half now sent (the probe)
	verify        *item   // isolated by the narrowing, sent alone before the others
	restarts      int     // start-overs of the call (maxRestarts)
	left          int     // bisection commands left to the call
	started       bool    // left has been set
	lastKind      string  // FailureKind of the previous attempt's whole-command failure of ≥ 2 documents
	lastSeen      int64   // Engine.health when that failure was read
	lastBatch     []*item // the documents that failure charged (nil after a half's)
	isolated      map[*item]bool
	// healthAt is Engine.health when the server last gave no evidence of
	// health for the bisection (its start; for a repeated failure, the
	// earlier failure): a lone rejection is a verdict only past it.
	healthAt  int64
	doubtAt   int   // c.attempts of the first unproven lone rejection (0: none)
	doubts    int   // unproven lone rejections: a second one ends the bisection (refusedAll)
	lastDoubt int   // c.attempts of the last one
	doubted   *item // the document of the first, until convicted
	refused   bool  // the server refused every command: no more bisection
}

// maxRestarts bounds the start-overs of one call: a start-over needs a
// failure of the poison's own kind on a half without it, a coincidence.
const maxRestarts = 3

// maxResends is how many failures of another kind than the poison's one
// half may meet before its documents pay their tries again (the normal
// retry path): the first is re-sent uncharged.
const maxResends = 1

// narrow returns the documents of batch (the documents waiting, in input
// order, cut to an ordered write's window) that the next attempt sends:
// batch itself, except that isolated documents are sent alone and a
// bisection sends one half of its suspects.
func (c *Call) narrow(batch []*item) []*item {
	b := &c.ext.bis
	b.sentHalf = false
	if len(batch) <= 1 {
		return batch
	}
	if p, ok := c.probe(batch); ok {
		batch = p
	}
	if c.ordered && b.isolated[batch[0]] {
		return batch[:1]
	}
	if v := b.verify; v != nil && v.live() && !c.ordered {
		return []*item{v} // the isolated document alone, before the others
	}
	if b.active {
		cand := liveOf(b.suspect)
		if len(cand) <= 1 {
			b.active = false
			if len(cand) == 1 {
				c.isolateSuspect(cand[0])
				return c.narrow(batch)
			}
		} else {
			half := cand[:len(cand)/2]
			b.sentHalf = true
			if !c.ordered {
				return half
			}
			if end := prefixThrough(batch, half); end > 0 {
				return batch[:end]
			}
			b.active, b.sentHalf = false, false // the window holds no suspect: not bisecting
		}
	}
	return c.isolatedApart(batch)
}

// isolatedApart returns the documents of batch the next attempt sends
// when no half is: an ordered write's documents before its first
// isolated one; an unordered write's documents that are not isolated, or
// else one isolated document alone.
func (c *Call) isolatedApart(batch []*item) []*item {
	b := &c.ext.bis
	if len(b.isolated) == 0 {
		return batch
	}
	if c.ordered {
		for i, it := range batch {
			if b.isolated[it] {
				return batch[:i]
			}
		}
		return batch
	}
	var rest []*item
	var alone *item
	for _, it := range batch {
		switch {
		case !b.isolated[it]:
			rest = append(rest, it)
		case alone == nil:
			alone = it
		}
	}
	if len(rest) > 0 {
		return rest
	}
	return []*item{alone}
}

// isolate marks it to be sent alone from now on, and gives the call
// another bound of bisection commands.
func (c *Call) isolate(it *item) {
	b := &c.ext.bis
	if b.isolated == nil {
		b.isolated = map[*item]bool{}
	}
	b.isolated[it] = true
	b.left += BisectBound(len(c.items))
}

// observe reads what the attempt that sent batch proved for bisection:
// it starts a bisection, narrows it, or ends it (see the comment at the
// top of this file). err is the attempt's error.
func (c *Call) observe(batch []*item, err error) {
	b := &c.ext.bis
	whole := c.ext.whole
	c.ext.whole = nil
	c.bisectInit()
	if whole == nil && err == nil || whole == nil && len(batch) > 0 {
		c.e.health.Add(1) // the server executed the command
	}
	c.convict() // bisectproof.go
	if v := b.verify; v != nil && len(batch) == 1 && batch[0] == v {
		c.observeVerify(v, whole)
		return
	}
	if b.sentHalf {
		c.observeHalf(batch, whole)
		return
	}
	if whole == nil || len(batch) < 2 {
		if err == nil || whole == nil {
			b.lastKind = ""
		}
		return
	}
	c.maybeBisect(batch, whole)
}

// observeHalf narrows the bisection after an attempt that sent a half of
// its suspects (batch), whose whole-command failure is whole (nil: the
// half was executed), and ends it when one suspect or none is left, or
// when its bound is spent. Only a failure of the poison's own kind
// narrows: a failure of another kind (a shutdown, a stepdown, a write
// conflict while a dropped connection is chased) says nothing about
// where the poison is, and the half goes again after the backoff,
// uncharged the first time (C72).
func (c *Call) observeHalf(batch []*item, whole *policy.Failure) {
	b := &c.ext.bis
	b.sentHalf = false
	b.left--
	switch {
	case whole == nil && b.foundIn(batch):
		// A statement of the half failed alone as the poison makes a
		// command fail (one statement: its own verdict): found, and
		// the call gets another bound, as for an isolated document.
		b.active, b.suspect, b.resent = false, nil, 0
		b.left += BisectBound(len(c.items))
	case whole == nil:
		// The half was executed: the poison is among the others. An
		// ordered write's statements after its first write error were
		// not executed (still pending): they stay suspects.
		// A half that settled a statement made progress the number of
		// documents bounds: only a half that settled none spends the
		// bound (an ordered half stopped at once by a write error).
		ran := executed(batch)
		b.suspect, b.resent = without(liveOf(b.suspect), ran), 0
		if len(liveOf(ran)) < len(ran) {
			b.left++
		}
	case !poisonSuspect(whole, c.e.cfg.Classifier.Classify(*whole)).possible,
		FailureKind(whole) != b.kind:
		// Nothing reached the server, it asked to slow down, or the
		// half failed otherwise than the poison makes a command fail:
		// the half proved nothing either way; it goes again after the
		// backoff, the first time uncharged (then its documents pay
		// their tries: the normal retry path bounds it), and the
		// bisection command is given back.
		b.resent++
		b.left++
		if b.resent <= maxResends {
			giveBack(batch, whole, false)
		}
	default:
		b.suspect, b.resent = liveOf(batch), 0
		giveBack(batch, whole, true)
	}
	if cand := liveOf(b.suspect); len(cand) <= 1 && b.active {
		b.active = false
		if len(cand) == 1 {
			c.isolateSuspect(cand[0])
		} else {
			c.restart() // every suspect was written: the poison is elsewhere
		}
	}
	if b.left <= 0 {
		b.active = false
	}
	if whole != nil {
		b.lastKind, b.lastSeen, b.lastBatch = FailureKind(whole), c.e.health.Load(), nil
	}
}

// giveBack returns the try a whole-command failure whole took from each
// document of batch (a bisection command is not a try); with now, those
// marked for retry go at once (the server is healthy: no backoff).
func giveBack(batch []*item, whole *policy.Failure, now bool) {
	for _, it := range batch {
		if it.tries > 0 && Charged(whole) {
			it.tries--
		}
		if now && it.state == retrying {
			it.to(pending)
		}
	}
}

// isolateSuspect isolates it, the one suspect the narrowing left; unless
// the poison's failure is deterministic (a failure of that kind cannot be
// transient), it is sent alone before the others (verify).
func (c *Call) isolateSuspect(it *item) {
	c.isolate(it)
	if b := &c.ext.bis; !b.deterministic {
		b.verify = it
	}
}

// foundIn reports whether a statement of batch, a half the server
// executed, ended unstored with a failure of the poison's kind.
func (b *bisection) foundIn(batch []*item) bool {
	for _, it := range batch {
		if !it.live() && !it.disp.Stored() && it.fail != nil && FailureKind(it.fail) == b.kind {
			return true
		}
	}
	return false
}

// observeVerify reads the lone attempt of v, the document the narrowing
// isolated (whole: its whole-command failure, nil when the server
// executed it). v written shows that a failure of a half was transient
// after all: the bisection starts over on what is left of its batch. A
// failure of another kind than the poison's proves nothing: v goes alone
// again, on its own tries (or, when they are spent, the bisection starts
// over). Any other end confirms v: it fails alone as its batch did, or
// for a reason of its own (a verdict on its one statement).
func (c *Call) observeVerify(v *item, whole *policy.Failure) {
	b := &c.ext.bis
	other := whole != nil && FailureKind(whole) != b.kind
	switch {
	case other && v.live():
		// v goes alone again
	case v.disp.Stored() || other:
		b.verify = nil
		c.restart()
	default:
		b.verify = nil
	}
}

// restart starts the bisection over on the live documents of its batch
// that are not isolated, within maxRestarts and another bound of
// commands: a narrowing that followed a transient failure of the
// poison's kind isolated a good document.
func (c *Call) restart() {
	b := &c.ext.bis
	var cand []*item
	for _, it := range liveOf(b.root) {
		if !b.isolated[it] {
			cand = append(cand, it)
		}
	}
	if len(cand) == 0 || b.restarts >= maxRestarts {
		return
	}
	b.restarts++
	b.left += BisectBound(len(c.items))
	if len(cand) == 1 {
		c.isolateSuspect(cand[0])
		return
	}
	b.active, b.suspect, b.resent = true, cand, 0
}

// maybeBisect starts a bisection of batch (two or more documents, not a
// half) after its whole-command failure whole, when the failure may come
// from a poison document and either says so at once (deterministic) or
// repeats the previous attempt's while the server executed other commands
// in between, and the call's bound is not spent.
func (c *Call) maybeBisect(batch []*item, whole *policy.Failure) {
	b := &c.ext.bis
	kind := FailureKind(whole)
	suspect := poisonSuspect(whole, c.e.cfg.Classifier.Classify(*whole))
	seen := c.e.health.Load()
	repeated := kind == b.lastKind && seen > b.lastSeen
	earlier, healthAt := b.lastBatch, seen
	if repeated {
		healthAt = b.lastSeen // the server executed a command since
	}
	b.lastKind, b.lastSeen, b.lastBatch = kind, seen, batch
	if !suspect.possible || !(suspect.deterministic || repeated) || b.left <= 0 || b.refused {
		return
	}
	if cand := liveOf(batch); len(cand) >= 2 {
		b.active, b.suspect, b.root, b.kind, b.resent = true, cand, cand, kind, 0
		if b.doubted == nil {
			b.healthAt, b.doubtAt, b.doubts = healthAt, 0, 0
		}
		b.deterministic = suspect.deterministic
		// The failures that proved a poison (this one, and the earlier
		// one of the same kind it repeats) were the poison's commands:
		// not tries of the good documents.
		giveBack(cand, whole, false)
		if repeated && !suspect.deterministic {
			giveBack(both(earlier, cand), whole, false)
		}
		b.lastBatch = nil
	}
}

// bisectInit gives the call its first bound of bisection commands.
func (c *Call) bisectInit() {
	if b := &c.ext.bis; !b.started {
		b.started, b.left = true, BisectBound(len(c.items))
	}
}

// RuleBisect is the Decision.Rule of a document kept for bisection: its
// command of several statements was rejected as a whole with a code that
// is a verdict on one document (10334, 121, 11000, ...), which says that
// some document of the command is poison and nothing about this one; it
// proved nothing applied.
const RuleBisect = "bisect"

// bisectDecision keeps a document of a command of two or more statements
// rejected as a whole for a per-document reason (a deterministic poison
// suspect, proved not applied) for bisection, while the call's bisection
// bound lasts: Retry, so that a half can carry it again. Otherwise Route
// decides (such a failure is never a verdict on the document: rule 2).
func (c *Call) bisectDecision(v verdict) (Decision, bool) {
	c.bisectInit()
	f := v.fail
	if f != c.ext.whole || v.proof != policy.NotApplied || c.refusedAll() {
		return Decision{}, false
	}
	lone := c.ext.wholeN == 1 && c.ext.bis.doubtAt == c.attempts
	if c.ext.wholeN < 2 && !lone || c.ext.bis.left <= 0 {
		return Decision{}, false
	}
	if s := poisonSuspect(f, c.e.cfg.Classifier.Classify(*f)); !s.deterministic {
		return Decision{}, false
	}
	return Decision{Action: Retry, Rule: RuleBisect}, true
}

// suspicion says whether a whole-command failure may come from a poison
// document, and whether one failure is enough to say so.
type suspicion struct{ possible, deterministic bool }

// poisonSuspect reads a whole-command failure f of class class.
func poisonSuspect(f *policy.Failure, class policy.Class) suspicion {
	switch {
	case f.Proof() == policy.NotSent,
		class == policy.Throttled, class == policy.Configuration,
		f.Shape == policy.ShapeConfiguration, f.Shape == policy.ShapeAuthorization:
		return suspicion{}
	case class == policy.Invalid || class == policy.Conflict:
		return suspicion{possible: true, deterministic: true}
	}
	return suspicion{possible: true}
}

// liveOf returns the items of its still waiting for an attempt.
func liveOf(its []*item) []*item {
	var out []*item
	for _, it := range its {
		if it.live() {
			out = append(out, it)
		}
	}
	return out
}

// without returns the items of its not in drop.
func without(its, drop []*item) []*item {
	gone := make(map[*item]bool, len(drop))
	for _, it := range drop {
		gone[it] = true
	}
	var out []*item
	for _, it := range its {
		if !gone[it] {
			out = append(out, it)
		}
	}
	return out
}

// both returns the items of a that are also in b.
func both(a, b []*item) []*item {
	in := make(map[*item]bool, len(b))
	for _, it := range b {
		in[it] = true
	}
	var out []*item
	for _, it := range a {
		if in[it] {
			out = append(out, it)
		}
	}
	return out
}

// prefixThrough returns the length of the prefix of batch (the waiting
// documents of an ordered write, in input order, cut to its window) that
// ends with the last document of half (a prefix of the suspects, in
// input order) or, when the window ends before it, with the window's
// last suspect of half; 0 when the window holds none of half.
func prefixThrough(batch, half []*item) int {
	first, last := half[0].index, half[len(half)-1].index
	end := 0
	for i, it := range batch {
		if it.index <= last {
			end = i + 1
		}
	}
	if end == 0 || batch[end-1].index < first {
		return 0
	}
	return end
}

// executed returns the items of batch, a command the server executed,
// that it did execute: all but an ordered write's statements after its
// first write error, which stay pending.
func executed(batch []*item) []*item {
	var out []*item
	for _, it := range batch {
		if it.state != pending {
			out = append(out, it)
		}
	}
	return out
}
