package engine

import (
	"fmt"
	"runtime/debug"
)

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
