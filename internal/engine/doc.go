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
//	prepare        prepare.go    marshal once, give _id, check 16 MiB; failures: prefailed
//	routePrefailed loop.go       prefailed -> parked (Invalid with bytes) or done
//	attempt        loop.go       send the pending documents (Send), one hook event each side
//	verdicts       route.go      per document: its failure and what the reply proved
//	                             (policy.Extract, Failure.Proof, the policy.ReplyShapes table)
//	decide         route.go      classify (policy.Classifier), then Route: one Decision
//	apply          loop.go       Settle -> done; Retry -> retrying; ReadBack, DeadLetter,
//	                             HandleConflict -> collected, then carryOut:
//	carryOut       loop.go       readBackAll (readback.go), conflicts (conflict.go), park (deadletter.go)
//	stopOrdered    loop.go       an ordered write ends after its first unhandled document: GiveUp
//	scheduleRetry  retry.go      attempt limit (AttemptLimit), MaxElapsed, retry budget, backoff
//	                             wait; what may not go again: GiveUp
//	flush          deadletter.go parked -> one gathered sink Put -> done (side.go retries it)
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
//     document and the others);
//   - a duplicate key on a possibly applied insert: readBackAll
//     (AfterReadBack: its own write, someone else's, or absent);
//   - the dead-letter sink's and a read-back's errors: retrySide.
//
// # The path of one failed batch
//
// An InsertMany of 3 documents whose second one fails 121 (unordered):
// Call.run -> attempt (Send; policy.Extract) -> route -> verdicts (write
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
