package writeguard

import "fmt"

// PanicError is a panic writeguard recovered: of a conflict handler or a
// dead-letter sink (kept in the document's Outcome.Err), of a document's
// encoder (a MarshalBSON: in that document's Outcome.Failure.Err; the
// document fails alone), or raised while the Target ran (What "target":
// the attempt's error, Report.Err and hooks.AttemptEnd.Err; the documents
// of that attempt are maybe applied). The panic was recovered and the
// other documents' outcomes are untouched. Reach it with errors.As, from
// the Report or from a hook event's error.
type PanicError struct {
	// What names what panicked: "conflict handler", "dead-letter sink",
	// "the document's encoder" or "target".
	What string
	// Value is the value passed to panic.
	Value any

	stack []byte // runtime/debug.Stack at the recovery
}

// Error names what panicked and the value, without the stack.
func (p *PanicError) Error() string {
	return fmt.Sprintf("writeguard: %s panicked: %v", p.What, p.Value)
}

// Stack returns the stack of the goroutine that panicked, as
// runtime/debug.Stack formats it at the recovery.
func (p *PanicError) Stack() []byte { return p.stack }

// newPanicError is the engine's Config.Panicked: the engine recovers the
// panic and the face builds its error.
func newPanicError(what string, value any, stack []byte) error {
	return &PanicError{What: what, Value: value, stack: stack}
}
