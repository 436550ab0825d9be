package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/progress"
	deadletter "github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/jsonschema"
	"github.com/writeguard/writeguard/otelhook"
	"github.com/writeguard/writeguard/policy"
	"github.com/writeguard/writeguard/replay"
)

// dlqReplayHelp is "dlq replay --help"'s text, before the flags.
const dlqReplayHelp = `Usage: writeguard dlq replay [flags]

Writes the originals of the pending envelopes the filters select into
their collection (the envelope's namespace), in batches, through a guarded
collection that retries transient errors. Written envelopes become
"replayed"; those rejected again stay pending with one more attempt;
duplicates of a document already written by an earlier (or interrupted)
replay count as replayed. Running it again is safe: it resumes where an
interrupted run stopped and never writes an inserted document twice.

Anyone who can write the dead-letter collection can forge an envelope:
its namespace and its original decide where the replay writes and what
it runs, with your rights. So the replay writes only into the namespaces
you name with --into db.collection (repeatable; required with --uri; with
--data-dir the demo's collection), never into admin, local, config, a
system.* collection or the dead-letter collection and its side
collections; it runs inserts only unless --allow update,replace,delete
says otherwise, and updateMany, deleteMany and filters without an _id
condition only with --allow-multi. An envelope's multiplicity (copies of
identical inputs) is written only up to 100,000, and only for inserts
whose _id writeguard assigned; another is refused. Each envelope refused
stays pending with the reason recorded (list --json, show) and is counted;
exit 3.

Every envelope the filters select is accounted for: replayed, or left
pending with its _id and reason (refused, skipped, or undecodable: named
on stderr). "pending left" counts them all; any left pending: exit 3.

An update, replace or delete whose replay was in flight when its replay
died (killed, lost connection) may or may not have been applied: the
next replay holds it (pending, replay_hold) instead of running it again;
check the target, then discard it or replay it with --include-held.
An envelope whose replay failed --quarantine-after times (default 5)
becomes "quarantined" and is skipped; --include-quarantined retries it.

With --data-dir there is no validator (the demo's validator lived in its
proxy): give --validator FILE (Extended JSON, e.g. {"$jsonSchema": {...}})
to enforce one on the replayed writes, or --no-validator to write every
original unchecked. With --uri the target collection's own validator
applies: widen it (collMod) first; a collection without one needs
--no-validator too. The command says on stderr what will check the writes
before it starts.

--workers N replays with N workers at once; each claims its batches with
a lease in the collection <dlq>_leases, so several workers, or several
"dlq replay" processes started independently, drain one backlog without
replaying an envelope twice, and each ends: an envelope is tried at most
once by each run. Envelopes claimed by a worker that dies wait --lease
for another.

--dry-run writes nothing and says how many envelopes would pass the
validator (the target's, or --validator FILE's); it takes the same
validator flags as the replay it rehearses (--no-validator: every
envelope would pass).
`

// addReplayFlags registers the flags of "dlq replay".
func addReplayFlags(fs *flag.FlagSet, f *dlqFlags) {
	fs.BoolVar(&f.dryRun, "dry-run", false, "write nothing; say how many envelopes would pass the validator")
	fs.IntVar(&f.batch, "batch", replay.DefaultBatchSize, "envelopes per batch")
	fs.StringVar(&f.validator, "validator", "", "with --data-dir: enforce the validator in `FILE` (Extended JSON) on the replayed writes")
	fs.BoolVar(&f.noValidator, "no-validator", false, "replay with no validation at all (required when no validator would apply: --data-dir without --validator, or a collection without one)")
	fs.IntVar(&f.workers, "workers", 1, fmt.Sprintf("run `N` replay workers in parallel (1..%d); each claims its batches with a lease", replay.MaxWorkers))
	fs.DurationVar(&f.lease, "lease", replay.DefaultLease, "how long a worker holds the envelopes it claimed (`DURATION`); envelopes of a worker that dies wait this long for another")
	fs.Var(&f.into, "into", "write only into this `db.collection` (repeatable; required with -uri; default with -data-dir: the demo's "+
		demo.DefaultDatabase+"."+demo.DefaultCollection+"); envelopes of other namespaces are refused")
	fs.Var(&f.allow, "allow", "also run these `kinds` of write: update, replace, delete (repeatable or comma-separated; inserts always)")
	fs.BoolVar(&f.allowMulti, "allow-multi", false, "allow updateMany/deleteMany and update, replace or delete filters without an _id condition")
	fs.IntVar(&f.quarantineAfter, "quarantine-after", replay.DefaultQuarantineAfter, "quarantine an envelope after `N` failed replays (0: never)")
	fs.BoolVar(&f.includeQuarantined, "include-quarantined", false, "also replay quarantined envelopes (deliberately)")
	fs.BoolVar(&f.includeHeld, "include-held", false, "also replay envelopes held because their write was in flight when a replay died (they may be applied twice)")
}

// replayOperations returns the kinds of write -allow names, with inserts.
func replayOperations(allow []string) (replay.Operations, string) {
	ops := replay.Inserts
	for _, a := range allow {
		switch strings.TrimSuffix(strings.ToLower(a), "s") {
		case "insert":
		case "update":
			ops |= replay.Updates
		case "replace":
			ops |= replay.Replaces
		case "delete":
			ops |= replay.Deletes
		default:
			return 0, fmt.Sprintf("-allow %s: want update, replace or delete", a)
		}
	}
	return ops, ""
}

// replayInto returns the namespaces replay may write: -into, or with
// -data-dir the demo's target.
func replayInto(f dlqFlags) []string {
	if len(f.into) == 0 && f.dataDir != "" {
		return []string{demo.DefaultDatabase + "." + demo.DefaultCollection}
	}
	return f.into
}

// checkReplayFlags returns what is wrong with the flags of "dlq replay",
// or "".
func checkReplayFlags(f dlqFlags) string {
	switch {
	case f.batch < 1 || f.batch > replay.MaxBatchSize:
		return fmt.Sprintf("-batch %d: want 1..%d", f.batch, replay.MaxBatchSize)
	case f.workers < 1 || f.workers > replay.MaxWorkers:
		return fmt.Sprintf("-workers %d: want 1..%d", f.workers, replay.MaxWorkers)
	case f.lease < replay.MinLease:
		return fmt.Sprintf("-lease %v: want at least %v", f.lease, replay.MinLease)
	case f.quarantineAfter < 0:
		return fmt.Sprintf("-quarantine-after %d: want ≥ 0 (0: never)", f.quarantineAfter)
	case f.validator != "" && f.noValidator:
		return "-validator and -no-validator are exclusive"
	case f.validator != "" && f.uri != "":
		return "-validator applies to -data-dir only; with -uri widen the collection's validator (collMod; at validationLevel " +
			"validated together with validationLevel strict, as replay.WidenValidator does) and replay"
	case f.dataDir != "" && f.validator == "" && !f.noValidator:
		// A dry run too: it rehearses the replay it would be, and against
		// no validator every envelope "would pass".
		return "the embedded server enforces no validator: give -validator FILE to enforce one on the replayed writes, " +
			"or -no-validator to write every original as it is (a dry run takes the same flags as the replay it rehearses)"
	}
	if _, msg := replayOperations(f.allow); msg != "" {
		return msg
	}
	for _, ns := range f.into {
		if db, coll, ok := strings.Cut(ns, "."); !ok || db == "" || coll == "" {
			return fmt.Sprintf("-into %s: want db.collection", ns)
		}
	}
	if f.uri != "" && len(f.into) == 0 && !f.dryRun {
		return "name the namespaces the replay may write with -into db.collection (repeatable): an envelope's namespace " +
			"is data anyone who can write the dead-letter collection can forge"
	}
	return ""
}

// sqliteBusy classifies the embedded server's "database is locked
// (SQLITE_BUSY)" InternalError as transient: FerretDB answers it when two
// writers of one SQLite database collide (several --workers), and the
// write, not applied, succeeds when sent again.
var sqliteBusy = policy.ClassifierFunc(func(f policy.Failure) policy.Class {
	if f.Code == 1 && strings.Contains(f.Message, "SQLITE_BUSY") {
		return policy.Transient
	}
	return policy.Unknown
})

type replayOut struct {
	Namespace string `json:"namespace"`
	// Validation says what checks the replayed writes.
	Validation string `json:"validation"`
	replay.Result
}

// replayRun is one "dlq replay": its flags, connection and the state
// shared by its namespaces.
type replayRun struct {
	c         *conn.Conn
	dlq       *mongo.Collection
	sel       deadletter.Filter
	f         dlqFlags
	validator bson.D
	stderr    io.Writer
	bar       *progress.Bar
	done      int64
	// into are the namespaces the replay may write.
	into []string
	tel  *telemetry
	rec  *otelhook.ReplayRecorder // nil without telemetry
}

func dlqReplay(ctx context.Context, c *conn.Conn, dlq *mongo.Collection, filter deadletter.Filter, f dlqFlags, validator bson.D, tel *telemetry, stdout, stderr io.Writer) int {
	// Which namespaces have envelopes to replay?
	sel := filter.WithDefaultStatus(envelope.StatusPending)
	if f.includeQuarantined && !slices.Contains(sel.Statuses, envelope.StatusQuarantined) {
		sel.Statuses = append(slices.Clip(sel.Statuses), envelope.StatusQuarantined)
	}
	rr := &replayRun{c: c, dlq: dlq, sel: sel, f: f, validator: validator, stderr: stderr, into: replayInto(f), tel: tel}
	if tel.Enabled() {
		rec, err := otelhook.NewReplayRecorder(otelhook.WithMeterProvider(tel.MeterProvider))
		if err != nil {
			return failure(stderr, "dlq replay", err)
		}
		rr.rec = rec
	}
	st, err := deadletter.Stats(ctx, dlq, rr.sel)
	if err != nil {
		return failure(stderr, "dlq replay", err)
	}
	if validator != nil && c.Proxy != nil {
		script, err := validatorScript(st.ByNamespace, validator)
		if err != nil {
			return usageError(stderr, "dlq replay", "-validator %s: %v", f.validator, err)
		}
		c.Proxy.SetScript(script)
	}
	if fe, ok := stderr.(*os.File); ok && progress.IsTerminal(fe) && !f.dryRun { // the bar is drawn on stderr
		rr.bar = progress.New(stderr, "replaying", int(st.Envelopes))
		defer rr.bar.Finish()
	}
	outs := []replayOut{}
	var runErr error
	for _, g := range st.ByNamespace {
		out, code, err := rr.namespace(ctx, g)
		if code != exitOK {
			return code
		}
		if out != nil {
			outs = append(outs, *out)
		}
		if err != nil {
			runErr = fmt.Errorf("%s: %w", g.Key, err)
			break
		}
	}
	left, lerr := deadletter.Stats(context.WithoutCancel(ctx), dlq, rr.sel)
	if code := rr.report(stdout, outs, left, lerr, runErr); code != exitOK {
		return code
	}
	if f.dryRun || lerr != nil {
		return replayExit(outs, f.quarantineAfter, -1, stderr)
	}
	reportUndecodable(stderr, left)
	return replayExit(outs, f.quarantineAfter, leftPending(left), stderr)
}

// namespace replays (or dry-runs) the envelopes of one namespace. A
// non-zero code means stop at once (a usage error was printed).
func (rr *replayRun) namespace(ctx context.Context, g deadletter.Group) (*replayOut, int, error) {
	if !wellFormedNamespace(g.Key) {
		out, err := rr.malformed(ctx, g)
		return out, exitOK, err
	}
	db, coll, _ := strings.Cut(g.Key, ".")
	if why := replay.RefusedNamespace(g.Key, rr.dlq); why != "" || !slices.Contains(rr.into, g.Key) {
		return rr.refuse(ctx, g, why)
	}
	opts := []writeguard.Option{writeguard.WithBackoff(policy.Backoff{Base: 50 * time.Millisecond, Cap: 2 * time.Second, MaxAttempts: 6})}
	if rr.f.dataDir != "" {
		opts = append(opts, writeguard.WithClassifier(sqliteBusy))
	}
	if rr.tel.Enabled() {
		// The replay's own hooks: its writes are counted in
		// writeguard.replay.inputs, never as the application's inputs.
		h, err := otelhook.NewReplayHooks(otelhook.WithTracerProvider(rr.tel.TracerProvider), otelhook.WithMeterProvider(rr.tel.MeterProvider))
		if err != nil {
			return nil, failure(rr.stderr, "dlq replay", err), nil
		}
		opts = append(opts, writeguard.WithHooks(h))
	}
	target, err := writeguard.Wrap(rr.c.Client.Database(db).Collection(coll), opts...)
	if err != nil {
		return nil, failure(rr.stderr, "dlq replay", err), nil
	}
	validation, err := rr.validation(ctx, target)
	if err != nil {
		return nil, failure(rr.stderr, "dlq replay", err), nil
	}
	if validation == "" {
		return nil, usageError(rr.stderr, "dlq replay", "%s has no validator, so the replay would write every original "+
			"unchecked: widen or set its validator first, or give -no-validator to replay anyway", g.Key), nil
	}
	nf := rr.sel
	nf.Namespaces = []string{g.Key}
	ops, _ := replayOperations(rr.f.allow)
	if !rr.f.dryRun {
		fmt.Fprintf(rr.stderr, "writeguard dlq replay: %s: %s; validation: %s; writes allowed: %s%s; %s, batches of %d, lease %v\n",
			g.Key, plural(g.Envelopes, "envelope"), validation, ops, map[bool]string{true: " (multi-document too)"}[rr.f.allowMulti], plural(rr.f.workers, "worker"), rr.f.batch, rr.f.lease)
	}
	var res replay.Result
	if rr.f.dryRun {
		res, err = dryRun(ctx, rr.dlq, target, nf, rr.validator, rr.options(nf))
	} else {
		res, err = replay.Run(ctx, rr.dlq, target, rr.options(nf)...)
		rr.rec.Record(ctx, rr.dlq, replayCounts(res.Counts))
	}
	return &replayOut{Namespace: g.Key, Validation: validation, Result: res}, exitOK, err
}

// options returns the replay options of a namespace's run, filter nf.
func (rr *replayRun) options(nf deadletter.Filter) []replay.Option {
	base := rr.done
	ops, _ := replayOperations(rr.f.allow)
	o := []replay.Option{replay.WithFilter(nf), replay.WithBatchSize(rr.f.batch), replay.WithProgress(func(p replay.Progress) {
		if rr.bar != nil {
			rr.bar.Add(int(base + p.Scanned - rr.done))
			rr.done = base + p.Scanned
		}
	}), replay.WithInto(rr.into...), replay.WithOperations(ops), replay.WithQuarantineAfter(rr.f.quarantineAfter)}
	if rr.f.allowMulti {
		o = append(o, replay.WithMultiDocument())
	}
	if rr.f.includeQuarantined {
		o = append(o, replay.WithIncludeQuarantined())
	}
	if rr.f.includeHeld {
		o = append(o, replay.WithIncludeHeld())
	}
	if !rr.f.dryRun {
		o = append(o, replay.WithWorkers(rr.f.workers), replay.WithLease(rr.f.lease))
	}
	return o
}

// refuse runs the replay of a namespace it may not write (not named with
// -into, or always refused): nothing is written; each envelope is
// counted refused and keeps its reason in the DLQ.
func (rr *replayRun) refuse(ctx context.Context, g deadletter.Group, why string) (*replayOut, int, error) {
	if why == "" {
		why = "not named with -into"
	}
	if rr.f.dryRun {
		fmt.Fprintf(rr.stderr, "writeguard dlq replay: %s: %s not evaluated: %s\n", g.Key, plural(g.Envelopes, "envelope"), why)
		return nil, exitOK, nil
	}
	fmt.Fprintf(rr.stderr, "writeguard dlq replay: %s: %s refused: %s\n", g.Key, plural(g.Envelopes, "envelope"), why)
	db, coll, _ := strings.Cut(g.Key, ".")
	nf := rr.sel
	nf.Namespaces = []string{g.Key}
	res, err := replay.Run(ctx, rr.dlq, rr.c.Client.Database(db).Collection(coll), rr.options(nf)...)
	rr.rec.Record(ctx, rr.dlq, replayCounts(res.Counts))
	return &replayOut{Namespace: g.Key, Validation: "none: refused (" + why + ")", Result: res}, exitOK, err
}

// validation says what will check the replayed writes of target; "" when
// nothing would and -no-validator was not given.
func (rr *replayRun) validation(ctx context.Context, target writeguard.Collection) (string, error) {
	switch {
	case rr.validator != nil:
		return "the validator in " + rr.f.validator + ", enforced on the replayed writes", nil
	case rr.f.dataDir != "":
		return "none (-no-validator): every original is written as it is", nil
	}
	coll := replay.TargetCollection(target)
	if level, _, lerr := replay.ValidationOptionsOf(ctx, coll); lerr == nil {
		if advice := replay.WidenAdvice(coll.Name(), level); advice != "" {
			fmt.Fprintf(rr.stderr, "writeguard dlq replay: note: %s\n", advice)
		}
	}
	v, err := replay.CurrentValidator(ctx, coll)
	switch {
	case err != nil:
		return "", err
	case v != nil:
		return "the collection's own validator", nil
	case rr.f.noValidator:
		return "none (the collection has no validator; -no-validator)", nil
	}
	return "", nil
}

// report prints the outcomes (JSON or table); a non-zero code on failure.
func (rr *replayRun) report(stdout io.Writer, outs []replayOut, left deadletter.Summary, lerr, runErr error) int {
	if rr.f.asJSON {
		out := map[string]any{"dry_run": rr.f.dryRun, "namespaces": outs}
		if lerr == nil {
			out["pending"] = leftPending(left)
			out["undecodable"] = left.Undecodable
		}
		if runErr != nil {
			out["error"] = scrubbed(runErr.Error())
		}
		if err := writeJSON(stdout, out); err != nil {
			return failure(rr.stderr, "dlq replay", err)
		}
	} else {
		printReplay(stdout, outs, rr.f, rr.validator)
		if lerr == nil && !rr.f.dryRun {
			undecodable := ""
			if left.Undecodable > 0 {
				undecodable = fmt.Sprintf(" (%s of them undecodable)", n(left.Undecodable))
			}
			fmt.Fprintf(stdout, "pending left (this filter): %s%s\n", n(leftPending(left)), undecodable)
		}
	}
	if runErr != nil {
		return failure(rr.stderr, "dlq replay", runErr)
	}
	return exitOK
}

// replayExit is the exit status of a replay that ran to its end; pending
// is the number of envelopes of the filter still pending after it
// (leftPending; -1: unknown, a dry run): any makes it exitCheck, as the
// exit table says, whatever left them pending (skipped, undecodable,
// another process's).
func replayExit(outs []replayOut, quarantineAfter int, pending int64, stderr io.Writer) int {
	var still, conflicts, failed, refused, held, quarantined, skipped int64
	for _, o := range outs {
		skipped += o.Skipped
		still += o.StillInvalid
		conflicts += o.Conflicts
		failed += o.Failed
		refused += o.Refused
		held += o.Held
		quarantined += o.Quarantined
	}
	if refused > 0 {
		fmt.Fprintf(stderr, "writeguard dlq replay: %s refused (left pending, reason recorded): see the reasons, -into, -allow, -allow-multi\n", plural(refused, "envelope"))
	}
	if held > 0 {
		fmt.Fprintf(stderr, "writeguard dlq replay: %s held: their write was in flight when a replay died; check the target, "+
			"then discard them or replay them with -include-held\n", plural(held, "envelope"))
	}
	if quarantined > 0 {
		fmt.Fprintf(stderr, "writeguard dlq replay: %s quarantined after %d failed replays; -include-quarantined retries them\n",
			plural(quarantined, "envelope"), quarantineAfter)
	}
	switch {
	case failed > 0:
		fmt.Fprintf(stderr, "writeguard dlq replay: %s failed (left pending); run again\n", plural(failed, "envelope"))
		return exitFail
	case still > 0 || conflicts > 0 || refused > 0 || held > 0 || quarantined > 0 || skipped > 0 || pending > 0:
		return exitCheck
	}
	return exitOK
}

func printReplay(w io.Writer, outs []replayOut, f dlqFlags, validator bson.D) {
	if len(outs) == 0 {
		fmt.Fprintln(w, "nothing to replay: no pending envelope matches")
		return
	}
	for _, o := range outs {
		if o.DryRun {
			src := "the target's validator"
			if validator != nil {
				src = f.validator
			} else if o.Validator == nil {
				src = "no validator (the target has none)"
			}
			fmt.Fprintf(w, "dry run %s against %s: %s envelopes match; %s would pass, %s would fail, %s undetermined\n",
				o.Namespace, src, n(o.Matched), n(o.WouldPass), n(o.WouldFail), n(o.Undetermined))
			continue
		}
		if !wellFormedNamespace(o.Namespace) {
			printMalformed(w, o)
			continue
		}
		fmt.Fprintf(w, "replayed %s: %s in %s, %.2fs\n", o.Namespace, plural(o.Scanned, "envelope"), plural(o.Batches, "batch"), o.Elapsed.Seconds())
		line := func(name string, v int64, note string) {
			fmt.Fprintf(w, "  %-14s %8s  %s\n", name, n(v), note)
		}
		line("replayed", o.Replayed, fmt.Sprintf("written to %s (%s of them were there already)", o.Namespace, n(o.ReplayedByDuplicate)))
		line("documents", o.Written, "writes applied by this run (an envelope of multiplicity n is n; those there already not counted)")
		line("still invalid", o.StillInvalid, "rejected again: pending, attempts + 1")
		line("conflicts", o.Conflicts, "another document holds the key: pending")
		line("failed", o.Failed, "other errors: pending, run again")
		line("skipped", o.Skipped, "not replayable as stored (cut, redacted or withheld fields, undecodable): pending, reason recorded")
		if o.Refused > 0 {
			line("refused", o.Refused, "not allowed (-into, -allow, -allow-multi) or inconsistent (multiplicity): pending, reason recorded")
		}
		if o.Held > 0 {
			line("held", o.Held, "in flight when a replay died: pending, for an operator (-include-held)")
		}
		if o.Quarantined > 0 {
			line("quarantined", o.Quarantined, "failed too often: skipped from now on (-include-quarantined)")
		}
		if o.LeasesLost > 0 {
			line("lost", o.LeasesLost, "claim lost before the send (paused past the lease): not sent, left to the replay that took it over")
		}
		for i, p := range o.Problems {
			if i == 10 {
				fmt.Fprintf(w, "  ... %d more problems (--json lists up to 100)\n", len(o.Problems)-10)
				break
			}
			fmt.Fprintf(w, "  %s %s (id %s): %s\n", p.Outcome, p.Fingerprint[:min(12, len(p.Fingerprint))], rawString(p.EnvelopeID), scrubbed(p.Reason))
		}
	}
}

// dryRun runs replay's dry run, and where the server cannot evaluate it
// (FerretDB: no $replaceRoot, no $jsonSchema in queries) evaluates the
// validator in the client with the same $jsonSchema implementation as the
// demo's proxy.
func dryRun(ctx context.Context, dlq *mongo.Collection, target writeguard.Collection, filter deadletter.Filter, validator bson.D, opts []replay.Option) (replay.Result, error) {
	o := append(opts, replay.WithDryRun())
	if validator != nil {
		o = append(o, replay.WithValidator(validator))
	}
	res, err := replay.Run(ctx, dlq, target, o...)
	if err == nil || !errors.Is(err, replay.ErrDryRunUnsupported) {
		return res, err
	}
	v, err := clientValidator(ctx, target, validator)
	if err != nil {
		return res, err
	}
	q, err := filter.WithDefaultStatus(envelope.StatusPending).Query(time.Now())
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	cur, err := dlq.Find(ctx, q, options.Find().SetProjection(bson.D{{Key: "original", Value: 1}, {Key: "original_truncated", Value: 1}, {Key: "original_redacted", Value: 1}, {Key: "original_pieces", Value: 1}, {Key: "operation", Value: 1}}))
	if err != nil {
		return res, err
	}
	defer cur.Close(ctx)
	res = replay.Result{DryRun: true}
	for cur.Next(ctx) {
		tallyDryRun(&res, cur.Current, v)
	}
	res.Elapsed = time.Since(t0)
	if validator != nil {
		res.Validator, _ = bson.Marshal(validator)
	}
	return res, cur.Err()
}

// clientValidator compiles the validator a dry run evaluates in the
// client: validator (--validator FILE), else the target's own; nil when
// the target has none.
func clientValidator(ctx context.Context, target writeguard.Collection, validator bson.D) (*jsonschema.Validator, error) {
	var v *jsonschema.Validator
	var err error
	if validator != nil {
		if v, err = jsonschema.Compile(validator); err != nil {
			return nil, err
		}
	} else if tc := replay.TargetCollection(target); tc != nil {
		cur, err := replay.CurrentValidator(ctx, tc)
		if err != nil {
			return nil, err
		}
		if cur != nil {
			if v, err = jsonschema.Compile(cur); err != nil {
				return nil, fmt.Errorf("the target's validator cannot be evaluated client-side: %w", err)
			}
		}
	}
	return v, nil
}

// tallyDryRun counts the envelope raw into a client-side dry run's res:
// undetermined when its original cannot be replayed as stored (missing,
// cut, redacted, kept in pieces, a bulk write's), else whether v passes it
// (nil v: no validator, it passes).
func tallyDryRun(res *replay.Result, raw bson.Raw, v *jsonschema.Validator) {
	res.Matched++
	res.Scanned++
	op, _ := raw.Lookup("operation").StringValueOK()
	tr, _ := raw.Lookup("original_truncated").BooleanOK()
	rd, _ := raw.Lookup("original_redacted").BooleanOK()
	_, apart := raw.LookupErr("original_pieces") // kept in pieces: not evaluated here
	orig, ok := raw.Lookup("original").DocumentOK()
	if !ok || tr || rd || apart == nil || op == "bulkWrite" {
		res.Undetermined++
		return
	}
	if v == nil {
		res.WouldPass++
		return
	}
	var d bson.D
	if err := bson.Unmarshal(orig, &d); err != nil {
		res.Undetermined++
		return
	}
	if v.Validate(d) == nil {
		res.WouldPass++
	} else {
		res.WouldFail++
	}
}

// replayCounts names the outcomes of a replay run for
// writeguard.replay.envelopes. Quarantined is not one: it counts among
// still_invalid, conflict and failed; quarantined envelopes show in
// writeguard.dlq.envelopes{writeguard.envelope.status="quarantined"}.
func replayCounts(c replay.Counts) map[string]int64 {
	return map[string]int64{
		otelhook.ReplayReplayed: c.Replayed, otelhook.ReplayStillInvalid: c.StillInvalid,
		otelhook.ReplayConflict: c.Conflicts, otelhook.ReplayFailed: c.Failed, otelhook.ReplaySkipped: c.Skipped,
		otelhook.ReplayRefused: c.Refused, otelhook.ReplayHeld: c.Held,
	}
}
