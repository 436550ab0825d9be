// Package engine is writeguard's write loop: it drives every input of a
// guarded call to one terminal disposition, and holds every rule only the
// loop uses. The root package is its face: it checks the caller's
// arguments, builds the engine's Config from the options, hands each
// guarded method's driver call to the engine as a Send, and lifts the
// engine's per-document Result into a *writeguard.Report. engine never
// imports the root package (.ci/run checks it); what it needs from the root
// it declares: Reader (read-backs), Resolver (the conflict handler),
// Config.Report (the error of a call that did not write everything).
//
// # The loop (loop.go, Call.run)
//
//	prepareAhead   prepare.go    the documents of an insert call, as it goes: until those
//	                             not sent fill one command, encode each once, give it its
//	                             _id, check 16 MiB (a bulk write's inserts: all at once,
//	                             PrepareModels); failures: prefailed
//	routePrefailed loop.go       prefailed -> parked (Invalid with bytes) or done
//	narrow         bisect.go     which pending documents go: all, an isolated one alone,
//	                             or one half of a poison suspect set (bisection, C66)
//	commands       commands.go   cut the documents that go into the server commands the driver
//	                             would send (kinds, maxWriteBatchSize, maxMessageSizeBytes):
//	                             one Send, one command; an ordered write stops at a command
//	                             that did not write all
//	attempt        loop.go       send one command (Send), one hook event each side; a panic
//	                             of the Target is that attempt's failure
//	verdicts       route.go      per document: its failure and what the reply proved
//	                             (policy.Extract, Failure.Proof, the policy.ReplyShapes table;
//	                             a command of one statement: statement.go, oneStatement)
//	decide         route.go      classify (policy.Classifier), then Route: one Decision
//	apply          loop.go       Settle -> done; Retry -> retrying; ReadBack, DeadLetter,
//	                             HandleConflict -> collected, then carryOut:
//	carryOut       loop.go       readBackAll (readback.go), conflicts (conflict.go), park (deadletter.go)
//	stopOrdered    loop.go       an ordered write ends after its first unhandled document: GiveUp
//	observe        bisect.go     start, narrow or end a bisection from what the attempt proved
//	scheduleRetry  retry.go      attempt limit (AttemptLimit), MaxElapsed, retry budget, backoff
//	                             wait; what may not go again: GiveUp
//	flush          deadletter.go parked -> one gathered sink Put -> done (side.go retries it)
//	release        loop.go       a stored insert's bytes go as it settles (its _id stays)
//	finish         result.go     Result -> Config.Report; the OperationFinished hook
//
// # One state per document (state.go)
//
// Each input is in one state: pending, prefailed, retrying, parked or done;
// item.to is the only place that changes it, and its table is the only list
// of legal moves. What attempts proved the document may be (evidence:
// none, maybe applied, applied unconfirmed) is kept beside it, never
// lowered except by a read-back that finds another document under the _id.
//
// # Where each kind of reply is read
//
//   - an acknowledged attempt: attempt (every document written);
//   - w: 0: attempt (every document unacknowledged);
//   - a write error, a write concern error, a whole-command error, a
//     network error, a checkout or selection error: verdicts, through the
//     shape's row of policy.ReplyShapes (what it proves about the failed
//     document, the others, and an ordered command's tail; a write error
//     proves its statement not applied only for the codes of
//     policy.WriteErrorVerdictCodes; one whose index names no statement
//     proves nothing);
//   - a duplicate key on a possibly applied insert: readBackAll
//     (AfterReadBack: its own write, someone else's, or absent);
//   - the dead-letter sink's and a read-back's errors: retrySide;
//   - the target (target.go): read-backs read the primary (PrimaryReads);
//     whether _id is unique (UniqueID) decides whether a possibly applied
//     insert may be re-sent; the write limits (LimitsOf) bound commands.
//
// # The path of one failed batch
//
// An InsertMany of 3 documents whose second one fails 121 (unordered):
// Call.run -> commands -> attempt (Send; policy.Extract) -> route -> verdicts (write
// error: the failed document not applied, the others applied) -> settle
// (documents 0 and 2 written) -> decide (Invalid) -> Route (DeadLetter) ->
// apply -> carryOut -> park -> run's loop (nothing pending) ->
// flushDeadLetters -> deadLetter -> put (retrySide) -> settle
// (dead_lettered) -> finish -> Config.Report. Every step is in this
// package; the root is entered again only by Send and Report.
//
// The rules (rules.go: Route, GiveUp, AfterReadBack, AttemptLimit,
// OrderedWindow, ReadBackFallback, Charged) are pure functions with
// exhaustive table tests; Wait (wait.go) is the one place the loop sleeps.
package engine
