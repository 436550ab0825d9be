package faultproxy

import (
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
)

// Validation levels and actions of a collection (create and collMod
// options validationLevel and validationAction; mongodb/mongo
// src/mongo/db/catalog/collection_options.idl ValidationLevel,
// ValidationAction).
const (
	// LevelStrict checks every insert and update (the default).
	LevelStrict = "strict"
	// LevelModerate skips updates of documents already invalid; inserts
	// are checked as under strict (the only writes the bed validates).
	LevelModerate = "moderate"
	// LevelOff checks nothing.
	LevelOff = "off"
	// LevelValidated (MongoDB 8.3+, featureFlagValidatedValidationLevel):
	// like strict, and the server promises every stored document conforms,
	// so it refuses what could break that: the action warn, a validator
	// change while the level stays validated, and setting the level on an
	// existing collection (mongodb/mongo
	// src/mongo/db/shard_role/shard_catalog/document_validation_helpers.cpp
	// checkValidationOptionsCanBeUsed; jstests validated_validation_level
	// test: "Rules changes are ok if we also downgrade to strict"). The
	// level is named "constraint" in some plans; the server source and its
	// tests call it "validated", which is what the bed accepts.
	LevelValidated = "validated"

	// ActionError rejects a failing document with 121 (the default).
	ActionError = "error"
	// ActionWarn stores it and logs the failure.
	ActionWarn = "warn"
	// ActionErrorAndLog (MongoDB 8.1, featureFlagErrorAndLogValidationAction)
	// rejects it with 121 and also logs the failure.
	ActionErrorAndLog = "errorAndLog"
)

// ValidationOptions say how an emulated validator applies: Level (one of
// the Level constants; "" is strict) and Action (one of the Action
// constants; "" is error).
type ValidationOptions struct {
	Level  string
	Action string
}

func (o ValidationOptions) withDefaults() ValidationOptions {
	if o.Level == "" {
		o.Level = LevelStrict
	}
	if o.Action == "" {
		o.Action = ActionError
	}
	return o
}

// check returns the server's refusal of these options, as
// checkValidationOptionsCanBeUsed gives it (2 BadValue), or nil. existing
// is the collection's current level ("" for a new collection),
// newValidator whether the command changes the rules.
func (o ValidationOptions) check(existing string, newValidator bool) error {
	switch o.Level {
	case LevelStrict, LevelModerate, LevelOff, LevelValidated:
	default:
		return fmt.Errorf("unknown validationLevel %q (want strict, moderate, off or validated)", o.Level)
	}
	switch o.Action {
	case ActionError, ActionWarn, ActionErrorAndLog:
	default:
		return fmt.Errorf("unknown validationAction %q (want error, warn or errorAndLog)", o.Action)
	}
	if o.Level != LevelValidated {
		return nil
	}
	if o.Action == ActionWarn {
		return serverMessage(msgValidatedWarn)
	}
	if existing != "" && existing != LevelValidated {
		return serverMessage(msgValidatedExisting)
	}
	if existing != "" && newValidator {
		return serverMessage(msgValidatedRules)
	}
	return nil
}

// serverMessage is an error whose text is the server's errmsg, verbatim.
type serverMessage string

func (m serverMessage) Error() string { return string(m) }

// The server's messages (checkValidationOptionsCanBeUsed).
const (
	msgValidatedWarn     = "Validation action of 'warn' is not allowed when Validation level is 'validated'"
	msgValidatedExisting = "Validation level 'validated' can not be set on existing collections."
	msgValidatedRules    = "Validator can not be changed when Validation level is 'validated'"
)

// ValidatorWithOptions is Validator with the collection's validation level
// and action. A level and action the server refuses together (validated
// with warn) make NewScript fail.
func ValidatorWithOptions(namespace string, validator any, opts ValidationOptions) ScriptItem {
	return validatorItem{namespace: namespace, validator: validator, opts: opts}
}

// emulatedValidator is the state of one namespace's emulated validator;
// collMod changes it.
type emulatedValidator struct {
	mu   sync.Mutex
	v    *jsonschema.Validator
	opts ValidationOptions
}

func (e *emulatedValidator) get() (*jsonschema.Validator, ValidationOptions) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.v, e.opts
}

// ValidationLogEntry is one validation failure the emulated server logged
// (validationAction warn or errorAndLog).
type ValidationLogEntry struct {
	// Namespace is the collection's; Index the statement's in the
	// client's command.
	Namespace string
	Index     int
	// Action is the action in force: warn (the document was stored) or
	// errorAndLog (it was rejected with 121).
	Action string
	// ErrInfo is the errInfo the failure would give.
	ErrInfo bson.Raw
}

// validationLog holds a proxy's ValidationLogEntry list.
type validationLog struct {
	mu      sync.Mutex
	entries []ValidationLogEntry
}

func (l *validationLog) add(e ValidationLogEntry) {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// ValidationLog returns the validation failures logged so far under the
// actions warn and errorAndLog, in order.
func (p *Proxy) ValidationLog() []ValidationLogEntry {
	p.vlog.mu.Lock()
	defer p.vlog.mu.Unlock()
	return append([]ValidationLogEntry(nil), p.vlog.entries...)
}

// insertValidation applies the emulated validator of an insert's
// namespace: it returns the validator that rejects documents (nil under
// level off and action warn) and logs the failures the actions warn and
// errorAndLog log (ordered inserts: up to the first rejected document).
func (s *session) insertValidation(x *exchange, script *Script) *jsonschema.Validator {
	ev := script.validator(x.cmd.Namespace)
	if ev == nil {
		return nil
	}
	v, opts := ev.get()
	if opts.Level == LevelOff {
		return nil
	}
	if opts.Action == ActionWarn || opts.Action == ActionErrorAndLog {
		for i, st := range x.stmts {
			var d bson.D
			if bson.Unmarshal(st, &d) != nil {
				continue
			}
			errInfo := v.Validate(jsonschema.WithID(d))
			if errInfo == nil {
				continue
			}
			raw, _ := bson.Marshal(errInfo)
			s.p.vlog.add(ValidationLogEntry{Namespace: x.cmd.Namespace, Index: i, Action: opts.Action, ErrInfo: raw})
			if opts.Action == ActionErrorAndLog && x.cmd.Ordered() {
				break
			}
		}
	}
	if opts.Action == ActionWarn {
		return nil
	}
	return v
}

// collMod answers a collMod of a namespace with an emulated validator
// (the backend has none to change): validator, validationLevel and
// validationAction are applied under the server's rules
// (ValidationOptions.check; a refusal is 2 BadValue, an invalid validator
// 2 BadValue too). done is false for other commands and namespaces.
func (s *session) collMod(x *exchange) (done bool, err error) {
	if x.cmd.Name != "collMod" {
		return false, nil
	}
	ev := s.p.script.Load().validator(x.cmd.Namespace)
	if ev == nil {
		return false, nil
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	opts := ev.opts
	var newV *jsonschema.Validator
	body := x.cmd.Body
	if v, e := body.LookupErr("validationLevel"); e == nil {
		opts.Level, _ = v.StringValueOK()
	}
	if v, e := body.LookupErr("validationAction"); e == nil {
		opts.Action, _ = v.StringValueOK()
	}
	if v, e := body.LookupErr("validator"); e == nil {
		doc, ok := v.DocumentOK()
		if !ok {
			return true, s.reply(x, errorReplyDoc(CommandError{Code: 2, CodeName: "BadValue", Message: "validator must be a document"}))
		}
		if newV, e = jsonschema.Compile(doc); e != nil {
			return true, s.reply(x, errorReplyDoc(CommandError{Code: 2, CodeName: "BadValue", Message: e.Error()}))
		}
	}
	if e := opts.check(ev.opts.Level, newV != nil); e != nil {
		return true, s.reply(x, errorReplyDoc(CommandError{Code: 2, CodeName: "BadValue", Message: e.Error()}))
	}
	ev.opts = opts
	if newV != nil {
		ev.v = newV
	}
	return true, s.reply(x, okReply())
}
