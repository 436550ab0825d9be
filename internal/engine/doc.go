// Package engine is writeguard's write loop: it drives every input of a
// guarded call to one terminal disposition, and holds every rule only the
// loop uses. The root package is its face: it checks the caller's
// arguments, builds the engine's Config from the options, describes each
// guarded call in one Spec (its inputs, the caller's marks, and a Send
// that makes one attempt through the driver), runs it once (Engine.Run),
// and lifts the call's per-document Result into a *writeguard.Report.
// engine never imports the root package (.ci/run checks it); what it
// needs from the root it declares: Reader (read-backs), Resolver (the
// conflict handler), Config.Report (the error of a call that did not write
// everything), Config.Panicked (the error of a recovered panic: the root's
// *PanicError, built where the panic is recovered, so that the Report and
// the hooks' events carry the same value). The root lifts the rest of what
// a call proved at its one return (Result -> Report: the engine's Reason
// into its own).
//
// # The loop (loop.go, Call.run)
//
//	Run            call.go       the call of one Spec: one item per input, the
//	                             models' kinds (prepareModels), the caller's marks
//	prepareAhead   prepare.go    the documents of an insert call, as it goes: until those
//	                             not sent fill one command, encode each once, give it its
//	                             _id, check 16 MiB (a bulk write's inserts: all at once,
//	                             prepareModels); failures: prefailed
//	routePrefailed loop.go       prefailed -> parked (Invalid with bytes) or done
//	narrow         bisect.go     which pending documents go: all, an isolated one alone,
//	                             or one half of a poison suspect set (bisection, C66)
//	pass           loop.go       the batch in the server commands the driver would send:
//	commands       commands.go   cut by kinds, maxWriteBatchSize, maxMessageSizeBytes:
//	                             one Send, one command; an ordered write stops at a command
//	                             that did not write all
//	attempt        loop.go       send one command (Send), one hook event each side; a panic
//	                             of the Target is that attempt's failure
//	sendLimited    limitcall.go  a slot of the adaptive limit (limit.go: AIMD on overload,
//	                             the failover gate), the send, then what the reply said
//	verdicts       route.go      per document: its failure and what the reply proved
//	                             (policy.Extract, Failure.Proof, the policy.ReplyShapes table;
//	                             a command of one statement: statement.go, oneStatement)
//	readWriteErrors writeerrors.go each write error read again with its statement (a multi
//	                             statement: write_error_multi) and the deployment (deployment.go,
//	                             hello: mongod or mongos); a 72 on an idempotent model: sent alone
//	hiddenFor      hidden.go     whether an error that says "not sent" of the driver's last
//	                             attempt may hide an earlier applied one (policy.ReplyShape.Hidden),
//	                             or what the wire's events proved (monitor.go: writeguard.Monitor;
//	                             wrapSend tags each attempt's context)
//	decide         route.go      classify (policy.Classifier), then Route: one Decision
//	apply          state.go      Settle -> done; Retry -> retrying; ReadBack, DeadLetter,
//	                             HandleConflict -> collected, then carryOut:
//	carryOut       state.go      readBackAll (readback.go), conflicts (conflict.go), park (deadletter.go)
//	stopOrdered    state.go      an ordered write ends after its first unhandled document: giveUp
//	observe        bisect.go     start, narrow or end a bisection from what the attempt proved
//	loneVerdict    bisectproof.go a lone rejection is a verdict only once the server showed health
//	scheduleRetry  retry.go      attempt limit (AttemptLimit), MaxElapsed, retry budget, backoff
//	                             wait; what may not go again: giveUp (GiveUp)
//	flush          deadletter.go parked -> one gathered sink Put -> done (side.go retries it)
//	finish         result.go     Config.Settled, then Result -> Config.Report; the
//	                             OperationFinished hook
//
// # The stop rule (loop.go pass, state.go giveUp)
//
// Once the engine ends a call (a configuration failure gives up every
// pending input, or the context ends: giveUp sets Call.stopped), no
// further command is sent; a command already sent is settled by its
// reply. pass never sends a command carrying a statement that already has
// its disposition (allLive). So a statement that was sent is never
// not_attempted, and not_attempted comes with neither MaybeWritten nor
// attempts (CASES C68).
//
// # The bisection rule (bisect.go)
//
// A half's whole-command failure narrows the suspects only when it is of
// the poison's own kind (FailureKind of the failure that started the
// bisection); any other failure says nothing about where the poison is:
// the half goes again, its first such failure not charged, its command
// given back. A non-deterministic kind may be transient too: the document
// the narrowing leaves is sent alone first, and if it is written the
// bisection starts over on what is left (at most maxRestarts times). Only
// executed statements leave the suspects. The bound stays finite:
// BisectBound(n) failing halves per bisection, isolation, find or
// start-over; halves that settled statements are bounded by the number of
// documents (CASES C66, C72).
//
// A lone document's whole-command rejection during a bisection (a half of
// one, or an isolated document sent alone) is its verdict only when the
// server executed a command of this Guarded since the bisection started
// (Engine.health past bisection.healthAt). Otherwise it is kept
// (doubted), the others go first (probe, for an ordered write), and once
// one is executed the rejection is its verdict (convict); if they fail
// too they are narrowed down in turn, and a second unproven lone
// rejection means the server refused every command: the call stops
// bisecting (refused) and Route decides (a whole-command failure: never a
// verdict). See bisectproof.go (trial finding B2).
//
// # One state per document (state.go)
//
// Each input is in one state: pending, prefailed, retrying, parked or done;
// item.to is the only place that changes it, and its table is the only list
// of legal moves. What attempts proved the document may be (evidence:
// none, maybe applied, applied unconfirmed) is kept beside it, never
// lowered except by a read-back that finds another document under the _id.
// The primitives every step calls live beside that table: settle (-> done,
// one Disposition hook event; a stored insert's bytes go: release), apply
// (one Decision), carryOut, giveUp (GiveUp for each document a stop ends)
// and stopOrdered.
//
// # Where each kind of reply is read
//
//   - an acknowledged attempt: attempt (every document written);
//   - w: 0: attempt (every document unacknowledged);
//   - a write error, a write concern error, a whole-command error, a
//     network error, a checkout or selection error: verdicts, through the
//     shape's row of policy.ReplyShapes (what it proves about the failed
//     document, the others, and an ordered command's tail; a write error
//     proves its statement not applied only as policy.WriteErrorShape
//     reads it with the deployment, writeerrors.go; one on a multi
//     statement or whose index names no statement proves nothing);
//   - a duplicate key on a possibly applied insert: readBackAll
//     (AfterReadBack: its own write, someone else's, or absent);
//   - the dead-letter sink's and a read-back's errors: retrySide;
//   - the target: read-backs read the primary (Config.Reader, which the
//     root makes with readback.PrimaryReads); whether _id is unique
//     (target.go, UniqueID) decides whether a possibly applied insert may
//     be re-sent; the write limits (LimitsOf) bound commands.
//
// # The path of one failed batch
//
// An InsertMany of 3 documents whose second one fails 121 (unordered):
// Engine.Run (call.go) -> Call.run (loop.go) -> pass -> commands
// (commands.go) -> attempt (Send; policy.Extract) -> route (route.go) ->
// verdicts (write error: the failed document not applied, the others
// applied) -> settle (state.go; documents 0 and 2 written) -> decide
// (Invalid) -> Route (rules.go; DeadLetter) -> apply (state.go) ->
// carryOut -> park (deadletter.go) -> run's loop (nothing pending) ->
// flushDeadLetters -> deadLetter -> put (retrySide, side.go) ->
// envelope.PutEach (Config.Sink) -> settle (dead_lettered) -> finish
// (result.go) -> Config.Report. Every step is in this package; the root is
// entered again only by Send, Report and Panicked.
//
// The rules (rules.go: Route, GiveUp, AfterReadBack, AttemptLimit,
// OrderedWindow, ReadBackFallback, Charged) are pure functions with
// exhaustive table tests; Wait (wait.go) is the one place the loop sleeps.
package engine
