package engine

import (
	"fmt"
	"runtime/debug"
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
