package writeguard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

type modelKind uint8

const (
	kindInsert modelKind = iota
	kindUpdate
	kindReplace
	kindDelete
)

// item is one input document or write model on its way through the chain.
type item struct {
	index      int
	kind       modelKind
	doc        bson.Raw      // insert: the prepared document; replace: the replacement
	id         bson.RawValue // insert: the _id
	model      mongo.WriteModel
	send       mongo.WriteModel // bulk: the model to send
	upsert     bool
	disp       Disposition
	fail       *policy.Failure
	class      policy.Class
	attempts   int
	maybe      bool // was in flight when an attempt ended ambiguously
	upsertRuns int
	retry      bool // scheduled for the next attempt
	err        error
	keywords   []string
	prefail    bool // failed in prepare, never sent
	idAssigned bool // writeguard gave the document its _id
}

func (it *item) idValue() any {
	if it.id.Type == 0 {
		return nil
	}
	return it.id
}

// resendable reports whether it may be re-sent after an ambiguous failure.
func (it *item) resendable(idempotent bool) bool {
	return it.kind == kindInsert || idempotent
}

// call is the state of one guarded call.
type call struct {
	g          *Guarded
	op         *hooks.Operation
	ctx        context.Context // the operation context (hooks)
	ordered    bool
	idempotent bool
	items      []*item
	send       func(ctx context.Context, batch []*item) (any, error)

	start    time.Time
	attempts int
	retries  int
	lastErr  error
	hint     string
	extra    []error
}

func (g *Guarded) newCall(name string, ordered bool) *call {
	return &call{
		g:       g,
		ordered: ordered,
		op:      &hooks.Operation{Name: name, Database: g.database, Collection: g.collection, Ordered: ordered},
	}
}

// newItems allocates n items in one slab.
func (c *call) newItems(n int) {
	slab := make([]item, n)
	c.items = make([]*item, n)
	for i := range slab {
		slab[i].index = i
		c.items[i] = &slab[i]
	}
}

// prepareDoc marshals one document once and makes sure it has an _id.
func (c *call) prepareDoc(it *item, doc any) {
	it.kind = kindInsert
	raw, id, assigned, err := prepare(doc)
	if err != nil {
		c.prefail(it, err)
		return
	}
	it.doc, it.id, it.idAssigned = raw, id, assigned
	c.checkSize(it)
}

func (c *call) checkSize(it *item) {
	if len(it.doc) > MaxDocumentSize {
		c.prefail(it, fmt.Errorf("document is %d bytes, over the %d-byte maximum (BSONObjectTooLarge)", len(it.doc), MaxDocumentSize))
		it.fail.Code, it.fail.CodeName = 10334, "BSONObjectTooLarge"
	}
}

func (c *call) prefail(it *item, err error) {
	it.prefail = true
	it.fail = &policy.Failure{Index: it.index, Origin: policy.OriginClient, Message: err.Error(), Err: err}
}

// prepare marshals doc to BSON and prepends a new ObjectID _id when it has
// none, as the driver does (ensureID), but once, before the first attempt.
func prepare(doc any) (raw bson.Raw, id bson.RawValue, assigned bool, err error) {
	if doc == nil {
		return nil, bson.RawValue{}, false, mongo.ErrNilDocument
	}
	own := false // the caller's own bytes, not bson.Marshal's output
	switch d := doc.(type) {
	case bson.Raw:
		raw, own = d, true
	case []byte:
		raw, own = d, true
	default:
		b, err := bson.Marshal(doc)
		if err != nil {
			return nil, bson.RawValue{}, false, mongo.MarshalError{Value: doc, Err: err}
		}
		raw = b
	}
	if own {
		// Check the caller's bytes once, here, rather than on the server.
		if err := raw.Validate(); err != nil {
			return nil, bson.RawValue{}, false, fmt.Errorf("invalid BSON document: %w", err)
		}
	}
	if v, err := raw.LookupErr("_id"); err == nil {
		return raw, v, false, nil
	}
	oid := bson.NewObjectID()
	out := make([]byte, 0, len(raw)+17)
	out = append(out, 0, 0, 0, 0, byte(bson.TypeObjectID))
	out = append(out, "_id"...)
	out = append(out, 0)
	out = append(out, oid[:]...)
	out = append(out, raw[4:]...)
	n := int32(len(out))
	out[0], out[1], out[2], out[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	id = bson.RawValue{Type: bson.TypeObjectID, Value: out[9 : 9+12]}
	return bson.Raw(out), id, true, nil
}

// prepareModel copies an insert model with a prepared document and keeps
// other models as they are.
func (c *call) prepareModel(it *item, m mongo.WriteModel) error {
	i := it.index
	it.model, it.send = m, m
	switch mm := m.(type) {
	case *mongo.InsertOneModel:
		c.prepareDoc(it, mm.Document)
		if !it.prefail || it.doc != nil {
			it.send = &mongo.InsertOneModel{Document: it.doc}
		}
	case *mongo.UpdateOneModel:
		it.kind, it.upsert = kindUpdate, mm.Upsert != nil && *mm.Upsert
	case *mongo.UpdateManyModel:
		it.kind, it.upsert = kindUpdate, mm.Upsert != nil && *mm.Upsert
	case *mongo.ReplaceOneModel:
		it.kind, it.upsert = kindReplace, mm.Upsert != nil && *mm.Upsert
	case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
		it.kind = kindDelete
	case nil:
		return fmt.Errorf("invalid model at index %d: %w", i, mongo.ErrNilDocument)
	default:
		return fmt.Errorf("invalid model at index %d: unsupported write model %T", i, m)
	}
	return nil
}

// run drives the call to a terminal disposition for every item. It returns
// the driver's result of the first attempt when that attempt succeeded for
// every item (so the caller gets exactly what the driver returns), and nil
// or a *Report.
func (c *call) run(ctx context.Context) (any, error) {
	g := c.g
	c.op.BatchSize = len(c.items)
	c.start = g.cfg.clock.Now()
	ctx = g.hooks.OperationStarted(ctx, c.op)
	c.ctx = ctx

	var first any
	c.routePrefailed(ctx)
	delay := time.Duration(0)
	for {
		batch := c.pending()
		if len(batch) == 0 {
			break
		}
		c.attempts++
		for _, it := range batch {
			it.attempts++
		}
		actx := g.hooks.AttemptStarted(ctx, &hooks.AttemptStart{Op: c.op, Attempt: c.attempts, Documents: len(batch), Delay: delay})
		t0 := time.Now()
		res, err := c.send(actx, batch)
		end := &hooks.AttemptEnd{Op: c.op, Attempt: c.attempts, Documents: len(batch), Duration: time.Since(t0), Err: err}
		if c.attempts == 1 && (err == nil || errors.Is(err, errUnacked)) {
			first = res
		}
		switch {
		case err == nil:
			g.hooks.AttemptFinished(actx, end)
			g.cfg.budget.Success()
			for _, it := range batch {
				c.settle(it, Written)
			}
		case errors.Is(err, errUnacked):
			end.Err = nil
			g.hooks.AttemptFinished(actx, end)
			for _, it := range batch {
				c.settle(it, Unacknowledged)
			}
			if !g.cfg.allowUnacked {
				c.extra = append(c.extra, ErrUnacknowledged)
			}
		default:
			c.lastErr = err
			fails := policy.Extract(err)
			if len(fails) > 0 {
				end.Code, end.Class, end.Failures = fails[0].Code, g.classifier.Classify(fails[0]), len(fails)
			}
			g.hooks.AttemptFinished(actx, end)
			c.route(ctx, batch, fails)
		}
		delay = c.scheduleRetry(ctx)
	}
	return first, c.finish(ctx)
}

// pending returns the items still to send, in input order.
func (c *call) pending() []*item {
	var out []*item
	for _, it := range c.items {
		if it.disp == "" {
			out = append(out, it)
		}
	}
	return out
}

// settle gives it its terminal disposition and reports it.
func (c *call) settle(it *item, d Disposition) {
	if it.disp != "" {
		return
	}
	it.disp, it.retry = d, false
	if !c.g.observed {
		return
	}
	ev := &hooks.Disposition{Op: c.op, Index: it.index, Disposition: d, Attempts: it.attempts, FailingKeywords: it.keywords}
	if it.fail != nil && d != Written {
		ev.Failed = true
		ev.Class, ev.Code, ev.CodeName = it.class, it.fail.Code, it.fail.CodeName
	}
	c.g.hooks.Disposition(c.ctx, ev)
}

// routePrefailed routes the documents that failed before any attempt
// (marshal errors, oversized documents).
func (c *call) routePrefailed(ctx context.Context) {
	var invalid []*item
	for _, it := range c.items {
		if !it.prefail {
			continue
		}
		it.class = c.g.classifier.Classify(*it.fail)
		if it.class == policy.Invalid && it.doc != nil {
			invalid = append(invalid, it)
			continue
		}
		c.settle(it, Failed)
	}
	c.deadLetter(ctx, invalid)
	c.stopOrderedAfterUnhandled()
}

// stopOrderedAfterUnhandled ends an ordered write at its first unhandled
// document: the pending documents after it are not attempted.
func (c *call) stopOrderedAfterUnhandled() {
	if !c.ordered {
		return
	}
	stop := false
	for _, it := range c.items {
		if stop && it.disp == "" {
			c.settle(it, NotAttempted)
			continue
		}
		if it.disp != "" && !it.disp.Handled() && !it.disp.Stored() {
			stop = true
		}
	}
}

// route assigns outcomes after a failed attempt of batch.
func (c *call) route(ctx context.Context, batch []*item, fails []policy.Failure) {
	perDoc := map[int]*policy.Failure{}
	var wce, whole *policy.Failure
	for i := range fails {
		f := &fails[i]
		switch {
		case f.Index >= 0 && f.Index < len(batch):
			perDoc[f.Index] = f
		case f.Origin == policy.OriginWriteConcern:
			wce = f
		default:
			whole = f
		}
	}
	var conflicts, invalid, readBack []*item
	wrote := false
	assign := func(it *item, f *policy.Failure) {
		cp := *f
		cp.Index = it.index
		it.fail = &cp
		it.class = c.g.classifier.Classify(*f)
		if f.Ambiguous {
			it.maybe = true
		}
		switch it.class {
		case policy.Transient, policy.Throttled:
			if (f.Ambiguous || it.maybe) && !it.resendable(c.idempotent) {
				if f.Origin == policy.OriginWriteConcern {
					c.settle(it, WrittenUnconfirmed)
				} else {
					c.settle(it, OutcomeUnknown)
				}
				return
			}
			it.retry = true
		case policy.Invalid:
			invalid = append(invalid, it)
		case policy.Conflict:
			switch {
			case it.kind == kindInsert && it.maybe:
				readBack = append(readBack, it)
			case it.upsert && it.upsertRuns < c.g.cfg.upsertRetries:
				it.upsertRuns++
				it.retry = true
			default:
				conflicts = append(conflicts, it)
			}
		default: // Unknown, Configuration: never retried
			if it.class == policy.Configuration {
				c.hint = hintFor(f)
			} else {
				c.g.logUnknown(ctx, f, c.op.Name)
			}
			switch {
			case f.Origin == policy.OriginWriteConcern:
				c.settle(it, WrittenUnconfirmed)
			case it.maybe:
				// An earlier attempt may have been applied: the final
				// error does not say whether the document is stored.
				c.settle(it, OutcomeUnknown)
			default:
				c.settle(it, Failed)
			}
		}
	}

	if whole != nil {
		for _, it := range batch {
			assign(it, whole)
		}
	} else {
		stop := len(batch) // ordered: the server stops at the first write error
		if c.ordered {
			for i := range batch {
				if perDoc[i] != nil {
					stop = i
					break
				}
			}
		}
		for i, it := range batch {
			switch {
			case perDoc[i] != nil:
				assign(it, perDoc[i])
			case i > stop:
				it.attempts-- // never reached by the server
			case wce != nil:
				assign(it, wce)
			default:
				wrote = true
				c.settle(it, Written)
			}
		}
	}
	if wrote {
		c.g.cfg.budget.Success()
	}

	conflicts = append(conflicts, c.resolveOwnWrites(ctx, readBack, batch)...)
	for _, it := range conflicts {
		c.handleConflict(ctx, it)
	}
	c.deadLetter(ctx, invalid)
	if c.hint != "" {
		for _, it := range c.items {
			if it.disp == "" {
				c.settle(it, NotAttempted)
			}
		}
		return
	}
	c.stopOrderedAfterUnhandled()
}

// resolveOwnWrites reads back, in one query, inserts that got a duplicate
// key after an attempt that may have been applied. A stored document equal
// to the one sent is this call's own earlier write: already_written. The
// rest are returned as genuine conflicts. If the read fails they are
// retried (and read again after their next duplicate key).
//
// The same query also reads the other possibly applied inserts still
// pending in batch (an ordered write stops at the first duplicate, so
// without this each one would cost an attempt); those found equal are
// already_written too, the others stay pending.
func (c *call) resolveOwnWrites(ctx context.Context, its, batch []*item) []*item {
	if len(its) == 0 {
		return nil
	}
	ids := make(bson.A, 0, len(its))
	for _, it := range its {
		ids = append(ids, it.id)
	}
	var others []*item
	for _, it := range batch {
		if it.disp == "" && !it.retry && it.maybe && it.kind == kindInsert && !contains(its, it) {
			others = append(others, it)
			ids = append(ids, it.id)
		}
	}
	stored, err := c.readBack(ctx, ids)
	if err != nil {
		for _, it := range its {
			it.err = fmt.Errorf("writeguard: reading back a possibly applied insert: %w", err)
			it.retry = true
		}
		return nil
	}
	ours := func(it *item) bool {
		doc, ok := stored[idKey(it.id)]
		return ok && policy.SameDocument(doc, it.doc)
	}
	var conflicts []*item
	for _, it := range its {
		if ours(it) {
			c.settle(it, AlreadyWritten)
			continue
		}
		conflicts = append(conflicts, it)
	}
	for _, it := range others {
		if ours(it) {
			c.settle(it, AlreadyWritten)
		}
	}
	return conflicts
}

func idKey(v bson.RawValue) string { return string(rune(v.Type)) + string(v.Value) }

func contains(its []*item, x *item) bool {
	for _, it := range its {
		if it == x {
			return true
		}
	}
	return false
}

// readBack reads the stored documents with the given _ids, in one query
// whose first reply holds them all (no getMore, so no cursor to lose when
// the pool is cleared under it). A retryable read error is retried with
// the write backoff, up to 3 reads.
func (c *call) readBack(ctx context.Context, ids bson.A) (map[string]bson.Raw, error) {
	for attempt := 1; ; attempt++ {
		out, err := c.readOnce(ctx, ids)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			return out, err
		}
		fs := policy.Extract(err)
		if len(fs) == 0 || !c.g.classifier.Classify(fs[0]).Retryable() {
			return nil, err
		}
		if policy.Wait(ctx, c.g.cfg.clock, c.g.cfg.backoff.Delay(attempt)) != nil {
			return nil, err
		}
	}
}

func (c *call) readOnce(ctx context.Context, ids bson.A) (map[string]bson.Raw, error) {
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}
	cur, err := c.g.target.Find(ctx, filter, options.Find().SetBatchSize(int32(len(ids))))
	if err != nil {
		return nil, err
	}
	defer cur.Close(ctx)
	out := map[string]bson.Raw{}
	for cur.Next(ctx) {
		doc := append(bson.Raw(nil), cur.Current...)
		if v, err := doc.LookupErr("_id"); err == nil {
			out[idKey(v)] = doc
		}
	}
	return out, cur.Err()
}

func (c *call) handleConflict(ctx context.Context, it *item) {
	cf := &Conflict{Operation: c.op.Name, Index: it.index, Document: it.doc, Failure: *it.fail, Target: c.g.target}
	cf.Model = it.model
	cf.KeyPattern, cf.KeyValue = it.fail.KeyPattern, it.fail.KeyValue
	var d Disposition
	err := recovered("conflict handler", func() (err error) {
		d, err = c.g.cfg.conflict.Resolve(ctx, cf)
		return err
	})
	if err == nil && !validResolution(d) {
		err = fmt.Errorf("writeguard: conflict handler returned disposition %q; want %q or \"conflict_<verb>\"", d, Conflicted)
	}
	if err != nil {
		it.err = err
		d = Conflicted
	}
	c.settle(it, d)
}

// recovered runs user code (a conflict handler, a sink) and turns a panic
// into an error naming what panicked, so that one bad callback cannot take
// the other documents' outcomes with it.
func recovered(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("writeguard: %s panicked: %v", what, r)
		}
	}()
	return f()
}

// scheduleRetry decides, after an attempt, whether the items marked for
// retry go again, and waits the backoff. It returns the delay waited.
func (c *call) scheduleRetry(ctx context.Context) time.Duration {
	g := c.g
	var retry, spent []*item
	var cause *item
	var serverDelay time.Duration
	for _, it := range c.items {
		if it.disp != "" || !it.retry {
			continue
		}
		limit := g.cfg.backoff.MaxAttempts
		if it.class == policy.Throttled && g.cfg.throttledAttempts < limit {
			limit = g.cfg.throttledAttempts
		}
		if it.attempts >= limit {
			spent = append(spent, it)
			continue
		}
		retry = append(retry, it)
		if cause == nil {
			cause = it
		}
		if it.fail.RetryAfter > serverDelay {
			serverDelay = it.fail.RetryAfter
		}
	}
	c.exhaust(ctx, spent)
	c.stopOrderedAfterUnhandled()
	if len(retry) == 0 {
		return 0
	}
	n := c.retries + 1
	delay := g.cfg.backoff.Delay(n)
	if serverDelay > delay {
		delay = serverDelay
	}
	giveUp := func() time.Duration {
		c.exhaust(ctx, retry)
		c.stopOrderedAfterUnhandled()
		return 0
	}
	if max := g.cfg.backoff.MaxElapsed; max > 0 && g.cfg.clock.Now().Add(delay).Sub(c.start) > max {
		return giveUp()
	}
	if !g.cfg.budget.Allow() {
		g.hooks.BudgetExhausted(ctx, &hooks.BudgetExhausted{Op: c.op, Documents: len(retry), Code: cause.fail.Code})
		g.logBudget(ctx, c.op.Name, len(retry))
		return giveUp()
	}
	g.hooks.RetryScheduled(ctx, &hooks.Retry{Op: c.op, Attempt: c.attempts + 1, Delay: delay, Documents: len(retry), Code: cause.fail.Code, Class: cause.class})
	if err := policy.Wait(ctx, g.cfg.clock, delay); err != nil {
		// The context ended (or its deadline is too close for the wait):
		// what was in flight may be stored, and there is no time left to
		// read it back.
		c.extra = append(c.extra, err)
		for _, it := range retry {
			if it.maybe {
				c.settle(it, OutcomeUnknown)
			} else {
				c.settle(it, Exhausted)
			}
		}
		c.stopOrderedAfterUnhandled()
		return 0
	}
	c.retries++
	for _, it := range retry {
		it.retry = false
	}
	return delay
}

// exhaust ends items whose retries are spent (attempts, elapsed time or
// budget). Inserts that may have been applied by an earlier attempt are
// read back first, in one query: those found stored and equal end
// already_written, not exhausted. If the read fails they end exhausted,
// flagged MaybeWritten.
func (c *call) exhaust(ctx context.Context, its []*item) {
	var ids bson.A
	for _, it := range its {
		if it.maybe && it.kind == kindInsert {
			ids = append(ids, it.id)
		}
	}
	if len(ids) > 0 && ctx.Err() == nil {
		if stored, err := c.readBack(ctx, ids); err == nil {
			for _, it := range its {
				if doc, ok := stored[idKey(it.id)]; ok && it.maybe && it.kind == kindInsert && policy.SameDocument(doc, it.doc) {
					c.settle(it, AlreadyWritten)
				}
			}
		}
	}
	for _, it := range its {
		c.settle(it, Exhausted)
	}
}

// finish reports the end of the call and builds its error.
func (c *call) finish(ctx context.Context) error {
	g := c.g
	counts := map[Disposition]int{}
	ok := true
	for _, it := range c.items {
		counts[it.disp]++
		if it.disp != Written && it.disp != AlreadyWritten && !(it.disp == Unacknowledged && g.cfg.allowUnacked) {
			ok = false
		}
	}
	var err error
	end := &hooks.OperationEnd{Op: c.op, Attempts: c.attempts, Retries: c.retries, Counts: counts, Duration: g.cfg.clock.Now().Sub(c.start)}
	if !ok {
		r := &Report{Operation: c.op.Name, Namespace: g.Namespace(), Attempts: c.attempts, Err: c.lastErr, Hint: c.hint, extra: c.extra}
		r.Outcomes = make([]Outcome, len(c.items))
		for i, it := range c.items {
			o := Outcome{Index: it.index, ID: it.idValue(), Disposition: it.disp, Failure: it.fail, Attempts: it.attempts,
				MaybeWritten: it.maybe, Document: it.doc, Model: it.model, Err: it.err}
			if it.fail != nil {
				o.Class = it.class
			}
			r.Outcomes[i] = o
			if !it.disp.Handled() && end.Code == 0 && it.fail != nil {
				end.Code, end.CodeName, end.Class = it.fail.Code, it.fail.CodeName, it.class
			}
		}
		err = r
	}
	end.Err = err
	g.hooks.OperationFinished(ctx, end)
	return err
}

// hintFor names the setting to fix after a Configuration failure.
func hintFor(f *policy.Failure) string {
	switch f.Code {
	case 20:
		return "hint: the deployment does not support retryable writes (a standalone server?): add retryWrites=false to the connection string"
	case 79:
		return "hint: the write concern names a mode the replica set does not have: check the w setting"
	case 100:
		return "hint: the write concern cannot be satisfied by this deployment (not enough data-bearing nodes): lower w"
	}
	return fmt.Sprintf("hint: configuration error %d %s", f.Code, f.CodeName)
}
