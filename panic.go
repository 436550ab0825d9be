package writeguard

import "fmt"

// PanicError is a panic writeguard recovered: of a conflict handler or a
// dead-letter sink (kept in the document's Outcome.Err), of a document's
// encoder (a MarshalBSON: in that document's Outcome.Failure.Err; the
// document fails alone), raised while the Target ran (What "target":
// the attempt's error, Report.Err and hooks.AttemptEnd.Err; the documents
// of that attempt are maybe applied), or of a hook (What "hook
// <Name>", such as "hook AttemptFinished": any func of hooks.Hooks; the
// event is lost to that hook, the call goes on and ends with its *Report,
// which carries the panic, even when every document was written; inside
// a transaction it is joined to the driver's error). The panic was
// recovered and the other documents' outcomes are untouched. Reach it
// with errors.As, from the Report or from a hook event's error.
type PanicError struct {
	// What names what panicked: "conflict handler", "dead-letter sink",
	// "the document's encoder", "target" or "hook <Name>" (the hooks.Hooks
	// field: "hook OperationStarted", "hook Disposition", ...).
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
