package engine

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
)

// A panic of user code (a conflict handler, a sink, a document's encoder)
// or raised while the Target runs is recovered, so that one bad callback
// cannot take the other documents' outcomes with it. The error it becomes
// is the root's (Config.Panicked: a *writeguard.PanicError naming what
// panicked, with the panic's value and the stack of the goroutine that
// panicked), built where the panic is recovered: the same value reaches
// the Report and the hooks' events.

// recovered runs user code (a conflict handler, a sink) and turns a panic
// into Config.Panicked's error naming what panicked and keeping its stack.
func (e *Engine) recovered(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = e.cfg.Panicked(what, r, debug.Stack())
		}
	}()
	return f()
}

// encoderPanic is a panic of a document's encoder as docEncoder.encode
// recovers it (its pool is shared by engines: it cannot call
// Config.Panicked); prepareDoc turns it into the engine's error.
type encoderPanic struct {
	value any
	stack []byte // runtime/debug.Stack at the recovery
}

func (p *encoderPanic) Error() string {
	return fmt.Sprintf("the document's encoder panicked: %v", p.value)
}

// panicMessage is the error of a recovered panic when Config.Panicked is
// nil (the engine's own tests): what panicked and the value, no stack.
func panicMessage(what string, value any, _ []byte) error {
	return fmt.Errorf("writeguard: %s panicked: %v", what, value)
}

// A panic of a hook (any func of hooks.Hooks) is recovered as well
// (guardHooks): the event it was given is lost to that hook, the call goes
// on, and the panic, as Config.Panicked's error naming "hook <Name>",
// joins the call's errors (Result.Extra): the call ends with its Report
// even when it wrote everything. A context-returning hook that panics
// gives back the context it got.

// panicKey is the context key of the hookPanics of the call that runs
// the hooks.
type panicKey struct{}

// hookPanics collects the recovered panics of the hooks of one call.
type hookPanics struct {
	mu   sync.Mutex
	errs []error
}

// take returns the panics collected so far and forgets them.
func (p *hookPanics) take() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := p.errs
	p.errs = nil
	return errs
}

// withPanics returns ctx carrying p, where guardHooks records a hook's
// panic.
func withPanics(ctx context.Context, p *hookPanics) context.Context {
	return context.WithValue(ctx, panicKey{}, p)
}

// hookPanicked records value, the panic of hook name, for the call of
// ctx; it is a deferred function's callee: recover was called by its
// caller.
func (e *Engine) hookPanicked(ctx context.Context, name string, value any) {
	err := e.cfg.Panicked("hook "+name, value, debug.Stack())
	if p, ok := ctx.Value(panicKey{}).(*hookPanics); ok {
		p.mu.Lock()
		p.errs = append(p.errs, err)
		p.mu.Unlock()
	}
}

// keepPanics returns out, the context a hook returned, still carrying the
// hookPanics of in.
func keepPanics(in, out context.Context) context.Context {
	if out == nil {
		return in
	}
	if p, ok := in.Value(panicKey{}).(*hookPanics); ok && out.Value(panicKey{}) == nil {
		return withPanics(out, p)
	}
	return out
}
