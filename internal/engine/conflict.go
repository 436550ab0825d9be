package engine

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/writeguard/writeguard/policy"
)

// conflictIdentifiable checks, before any handler runs, that the duplicate
// key identifies one stored document: a key value with a null or missing
// component identifies nobody (policy.KeyIdentifies), so the document ends
// "conflict" with that reason and no handler acts on it.
func (c *Call) conflictIdentifiable(it *item) bool {
	if len(it.fail.KeyValue) == 0 {
		return true
	}
	ok, field := policy.KeyIdentifies(it.fail.KeyPattern, it.fail.KeyValue)
	if ok {
		return true
	}
	it.err = fmt.Errorf("writeguard: duplicate key with null or missing field %q identifies no single document (use a sparse or partial unique index); no conflict handler was run", field)
	c.settle(it, policy.Conflicted)
	return false
}

// handleConflict hands it to the conflict handler (Config.Resolve) and
// settles it with the handler's disposition, or "conflict" with the
// handler's error, panic or invalid disposition kept in its Outcome.
func (c *Call) handleConflict(ctx context.Context, it *item) {
	var d policy.Disposition
	err := recovered("conflict handler", func() (err error) {
		d, err = c.e.cfg.Resolve(ctx, c.op.Name, it.index, it.doc, it.model, *it.fail)
		return err
	})
	if err == nil && !validResolution(d) {
		err = fmt.Errorf("writeguard: conflict handler returned disposition %q; want %q or \"conflict_<verb>\"", d, policy.Conflicted)
	}
	if err != nil {
		it.err = err
		d = policy.Conflicted
	}
	c.settle(it, d)
}

// validResolution reports whether d is a disposition a conflict handler
// may return.
func validResolution(d policy.Disposition) bool {
	return d.IsConflict() && d != "conflict_"
}

// PanicError is a panic of user code (a conflict handler, a sink)
// recovered by the engine: what panicked, the panic's value and the stack
// of the goroutine where it was raised.
type PanicError struct {
	What  string
	Value any
	stack []byte // runtime/debug.Stack at the recovery
}

// Error names what panicked and the value, without the stack.
func (p *PanicError) Error() string {
	return fmt.Sprintf("writeguard: %s panicked: %v", p.What, p.Value)
}

// Stack returns the stack of the goroutine that panicked, as
// runtime/debug.Stack formats it.
func (p *PanicError) Stack() []byte { return p.stack }

// recovered runs user code (a conflict handler, a sink) and turns a panic
// into a *PanicError naming what panicked and keeping its stack, so that
// one bad callback cannot take the other documents' outcomes with it.
func recovered(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{What: what, Value: r, stack: debug.Stack()}
		}
	}()
	return f()
}
