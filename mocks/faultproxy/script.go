package faultproxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
)

// FaultKind names a kind of fault; it keys Stats.Faults.
type FaultKind string

// The fault kinds.
const (
	// FaultErrorReply: the command was answered with an error reply
	// (ok: 0) and not forwarded.
	FaultErrorReply FaultKind = "error_reply"
	// FaultWriteConcernError: the command was forwarded and a
	// writeConcernError was added to the server's reply.
	FaultWriteConcernError FaultKind = "write_concern_error"
	// FaultCloseBeforeForward: the client connection was closed before
	// the command was forwarded (the write was never applied).
	FaultCloseBeforeForward FaultKind = "close_before_forward"
	// FaultCloseAfterForward: the command was forwarded and the client
	// connection closed instead of relaying the reply (applied, client
	// never heard).
	FaultCloseAfterForward FaultKind = "close_after_forward"
	// FaultDelay: the reply was held back for a while.
	FaultDelay FaultKind = "delay"
	// FaultValidation: one document was rejected by an emulated
	// $jsonSchema validator (counted per document).
	FaultValidation FaultKind = "validation"
	// FaultDocument: one document or statement was rejected by a
	// per-document fault (counted per document).
	FaultDocument FaultKind = "document"
	// FaultCustom: a Custom handler ran.
	FaultCustom FaultKind = "custom"
	// FaultApplyThenError: the first k statements were forwarded (and
	// applied) and the client got an error reply instead of the server's.
	FaultApplyThenError FaultKind = "apply_then_error"
	// FaultApplyThenClose: the first k statements were forwarded (and
	// applied) and the client connection was closed without a reply.
	FaultApplyThenClose FaultKind = "apply_then_close"
)

// CommandError is the error reply of an ErrorReply fault, the shape of the
// server's failCommand fail point: {ok: 0, errmsg, code, codeName,
// errorLabels, <Extra...>}.
type CommandError struct {
	// Code is the server error code (e.g. 91 ShutdownInProgress). It must
	// not be zero.
	Code int32
	// CodeName is the server's name for Code, e.g. "ShutdownInProgress".
	CodeName string
	// Message is errmsg; when empty a message naming the code is used.
	Message string
	// Labels are the top-level errorLabels (e.g. "RetryableWriteError");
	// omitted when empty.
	Labels []string
	// Extra fields appended to the reply after errorLabels, e.g.
	// {baseBackoffMS: int64(500)}.
	Extra bson.D
}

// WriteConcernError is the writeConcernError a WriteConcernErrorReply fault
// adds to the server's reply: {code, codeName, errmsg, errInfo?}.
type WriteConcernError struct {
	// Code is the write concern error code (e.g. 64 WriteConcernTimeout,
	// 91 ShutdownInProgress). It must not be zero.
	Code int32
	// CodeName is the server's name for Code.
	CodeName string
	// Message is errmsg; when empty a message naming the code is used.
	Message string
	// ErrInfo is the optional errInfo, e.g. {wtimeout: true}.
	ErrInfo bson.D
	// Labels are top-level errorLabels added to the reply (the server
	// puts RetryableWriteError there, not inside writeConcernError).
	Labels []string
}

// WriteError is a per-document write error: {index, code, <ErrInfo,
// KeyPattern, KeyValue, Extra>, errmsg}, the server's field order.
type WriteError struct {
	// Code is the write error code (e.g. 11000, 112 WriteConflict, 16500
	// for Cosmos DB throttling). It must not be zero.
	Code int32
	// Message is errmsg; when empty a message naming the code is used.
	Message string
	// ErrInfo is the optional errInfo document.
	ErrInfo bson.D
	// KeyPattern and KeyValue are the duplicate-key details of an 11000
	// error; omitted when nil.
	KeyPattern bson.D
	KeyValue   bson.D
	// Extra fields, placed before errmsg.
	Extra bson.D
}

func (we WriteError) doc(index int) bson.D {
	d := bson.D{{Key: "index", Value: int32(index)}, {Key: "code", Value: we.Code}}
	if we.ErrInfo != nil {
		d = append(d, bson.E{Key: "errInfo", Value: we.ErrInfo})
	}
	if we.KeyPattern != nil {
		d = append(d, bson.E{Key: "keyPattern", Value: we.KeyPattern})
	}
	if we.KeyValue != nil {
		d = append(d, bson.E{Key: "keyValue", Value: we.KeyValue})
	}
	d = append(d, we.Extra...)
	msg := we.Message
	if msg == "" {
		msg = fmt.Sprintf("faultproxy: injected write error %d", we.Code)
	}
	return append(d, bson.E{Key: "errmsg", Value: msg})
}

// DocMatcher selects documents for RejectDocuments. For an insert it is
// called with each document; for an update or delete with the statement's
// filter (q).
type DocMatcher func(doc bson.Raw) bool

// DocumentID returns a DocMatcher that selects the document whose _id
// equals id (numbers compare by value across int32/int64/double).
func DocumentID(id any) DocMatcher {
	want, err := toRawValue(id)
	return func(doc bson.Raw) bool {
		if err != nil {
			return false
		}
		got, lerr := doc.LookupErr("_id")
		return lerr == nil && rawValuesEqual(got, want)
	}
}

// Handler is the action of a Custom fault. It receives the parsed command
// and a forward function that sends a command (cmd itself, or a modified
// copy) to the upstream server, or the null backend, and returns the reply
// document. The handler returns the reply document to relay to the client,
// or ErrCloseConnection to close the client connection instead.
type Handler func(cmd *Command, forward func(*Command) (bson.Raw, error)) (bson.Raw, error)

// ErrCloseConnection, returned by a Handler, makes the proxy close the
// client connection without replying.
var ErrCloseConnection = errors.New("faultproxy: close the client connection")

// Rate is one entry of a RandomSchedule: fire Fault with probability P
// (0 ≤ P ≤ 1) on each occurrence.
type Rate struct {
	Fault Fault
	P     float64
}

// Fault is what happens to a command a Rule selects. Build one with
// ErrorReply, WriteConcernErrorReply, CloseBeforeForward,
// CloseAfterForward, Delay, RejectDocuments, ApplyThenError,
// ApplyThenClose, Custom, RandomSchedule or RateLimiter.Fault; the zero
// Fault is invalid.
type Fault struct {
	kind    FaultKind
	cmdErr  CommandError
	wce     WriteConcernError
	delay   time.Duration
	match   DocMatcher
	we      WriteError
	handler Handler
	seed    int64
	rates   []Rate
	random  bool
	k       int // statements applied by ApplyThenError / ApplyThenClose / FailShard
	batch   int // FailShard's child batch
	limiter *RateLimiter
}

// ErrorReply answers the command with e as an error reply without
// forwarding it, like the server's failCommand fail point.
func ErrorReply(e CommandError) Fault { return Fault{kind: FaultErrorReply, cmdErr: e} }

// WriteConcernErrorReply forwards the command (the write is applied) and
// adds w as writeConcernError to the server's reply.
func WriteConcernErrorReply(w WriteConcernError) Fault {
	return Fault{kind: FaultWriteConcernError, wce: w}
}

// CloseBeforeForward closes the client connection instead of forwarding
// the command: the write is never applied and the driver sees a network
// error.
func CloseBeforeForward() Fault { return Fault{kind: FaultCloseBeforeForward} }

// CloseAfterForward forwards the command, waits for the server's reply and
// then closes the client connection instead of relaying it: the write is
// applied but the driver sees a network error.
func CloseAfterForward() Fault { return Fault{kind: FaultCloseAfterForward} }

// Delay forwards the command and holds the reply back for d (d > 0) before
// relaying it. Close cuts the wait short.
func Delay(d time.Duration) Fault { return Fault{kind: FaultDelay, delay: d} }

// RejectDocuments makes the documents (insert) or statements (update,
// delete) selected by match fail with we, as if the server had rejected
// them (e.g. a scripted 112 WriteConflict or a Cosmos DB 16500). The other
// documents are forwarded with the ordered/unordered semantics of the
// command, and the reply's indexes are those of the client's command.
func RejectDocuments(match DocMatcher, we WriteError) Fault {
	return Fault{kind: FaultDocument, match: match, we: we}
}

// ApplyThenError forwards a rewritten command holding only the first k
// statements of the client's insert (documents), update (update
// statements) or delete (delete statements), with the same ordered flag
// and in the same form (document sequence or array in the body), waits
// for the server's reply, discards it, and answers the client with e as an
// ok: 0 error reply. It is what the server does when a batch is
// interrupted after committing its start: 11600 InterruptedAtShutdown,
// 11601 Interrupted, 11602 InterruptedDueToReplStateChange, 50
// MaxTimeMSExpired (server error_codes.yml, categories Interruption and
// ShutdownError). The first k statements are applied, the rest are not,
// and the reply says nothing about either. k larger than the batch
// applies the whole batch; k = 0 applies nothing. A command without
// statements (findAndModify, bulkWrite, ...) is forwarded whole when
// k > 0. An emulated validator of the namespace still checks the k
// statements. k must not be negative and e.Code must not be 0.
func ApplyThenError(k int, e CommandError) Fault {
	return Fault{kind: FaultApplyThenError, k: k, cmdErr: e}
}

// ApplyThenClose forwards the first k statements of the command as
// ApplyThenError does, waits for the server's reply, and closes the client
// connection without replying: the first k statements are applied, the
// rest are not, and the driver sees a network error. k larger than the
// batch applies all of it (then it is CloseAfterForward); k must not be
// negative.
func ApplyThenClose(k int) Fault { return Fault{kind: FaultApplyThenClose, k: k} }

// Custom runs h for the command instead of the normal forwarding: the
// escape hatch for faults the other constructors do not cover.
func Custom(h Handler) Fault { return Fault{kind: FaultCustom, handler: h} }

// RandomSchedule picks, independently for each occurrence of the rule it is
// given to, at most one of rates' faults: fault i with probability P_i, none
// with probability 1 - ΣP. The choice for occurrence k depends only on seed
// and k, so a schedule replays identically. ΣP must not exceed 1, and a
// Rate's Fault must not itself be a RandomSchedule.
func RandomSchedule(seed int64, rates ...Rate) Fault {
	return Fault{random: true, seed: seed, rates: append([]Rate(nil), rates...)}
}

// Kind returns the fault's kind ("" for a RandomSchedule, which resolves to
// one of its faults per occurrence, and for a RateLimiter's Fault, which
// resolves to a refusal or to no fault).
func (f Fault) Kind() FaultKind { return f.kind }

func (f Fault) validate() error {
	if f.limiter != nil {
		return nil
	}
	if f.random {
		if len(f.rates) == 0 {
			return errors.New("RandomSchedule needs at least one Rate")
		}
		sum := 0.0
		for i, r := range f.rates {
			if r.P < 0 || r.P > 1 {
				return fmt.Errorf("RandomSchedule rate %d: probability %v outside [0, 1]", i, r.P)
			}
			sum += r.P
			if r.Fault.random {
				return fmt.Errorf("RandomSchedule rate %d: nested RandomSchedule", i)
			}
			if r.Fault.limiter != nil {
				return fmt.Errorf("RandomSchedule rate %d: a RateLimiter's Fault (give it a rule of its own)", i)
			}
			if err := r.Fault.validate(); err != nil {
				return fmt.Errorf("RandomSchedule rate %d: %w", i, err)
			}
		}
		if sum > 1+1e-9 {
			return fmt.Errorf("RandomSchedule probabilities add up to %v > 1", sum)
		}
		return nil
	}
	switch f.kind {
	case "":
		return errors.New("no fault (zero Fault)")
	case FaultErrorReply:
		if f.cmdErr.Code == 0 {
			return errors.New("ErrorReply: code must not be 0")
		}
	case FaultWriteConcernError:
		if f.wce.Code == 0 {
			return errors.New("WriteConcernErrorReply: code must not be 0")
		}
	case FaultDelay:
		if f.delay <= 0 {
			return fmt.Errorf("Delay: duration %v must be positive", f.delay)
		}
	case FaultDocument:
		if f.match == nil {
			return errors.New("RejectDocuments: nil DocMatcher")
		}
		if f.we.Code == 0 {
			return errors.New("RejectDocuments: write error code must not be 0")
		}
	case FaultCustom:
		if f.handler == nil {
			return errors.New("Custom: nil Handler")
		}
	case FaultApplyThenError:
		if f.k < 0 {
			return fmt.Errorf("ApplyThenError: k = %d must not be negative", f.k)
		}
		if f.cmdErr.Code == 0 {
			return errors.New("ApplyThenError: code must not be 0")
		}
	case FaultApplyThenClose:
		if f.k < 0 {
			return fmt.Errorf("ApplyThenClose: k = %d must not be negative", f.k)
		}
	case FaultShard:
		switch {
		case f.batch < 0:
			return fmt.Errorf("FailShard: batch = %d must not be negative", f.batch)
		case f.k < 0:
			return fmt.Errorf("FailShard: applied = %d must not be negative", f.k)
		case f.cmdErr.Code == 0:
			return errors.New("FailShard: code must not be 0")
		}
	}
	return nil
}

// resolve returns the concrete fault for occurrence k (1-based), or false
// when a RandomSchedule draws "no fault".
func (f Fault) resolve(k int64) (Fault, bool) {
	if f.limiter != nil {
		return f.limiter.resolveLimit()
	}
	if !f.random {
		return f, true
	}
	r := rand.New(rand.NewPCG(uint64(f.seed), uint64(k)))
	x := r.Float64()
	for _, rate := range f.rates {
		if x < rate.P {
			return rate.Fault, true
		}
		x -= rate.P
	}
	return Fault{}, false
}

// KnownCommands are the command names a Rule may name (read-only: the
// list is copied at start-up, changing it has no effect). Matching is exact
// (command names are case-sensitive); the legacy spellings of hello,
// isMaster and ismaster, are listed separately.
var KnownCommands = []string{
	"abortTransaction", "aggregate", "buildInfo", "bulkWrite", "collMod", "commitTransaction",
	"count", "create", "createIndexes", "currentOp", "dbStats", "delete", "distinct", "drop",
	"dropDatabase", "dropIndexes", "endSessions", "explain", "find", "findAndModify",
	"getLastError", "getMore", "getParameter", "hello", "insert", "isMaster", "ismaster",
	"killCursors", "killSessions", "listCollections", "listDatabases", "listIndexes", "ping",
	"refreshSessions", "renameCollection", "saslContinue", "saslStart", "serverStatus",
	"startSession", "update",
}

var knownCommands = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range KnownCommands {
		m[c] = true
	}
	return m
}()

// Always, given to Rule.Times, makes a rule fire on every occurrence from
// its Nth on.
const Always = -1

// Rule selects commands and says which Fault to apply to which occurrence.
// Build it with On (or OnAny) and its chainable methods; NewScript checks
// it. A rule counts the commands it matches (name, namespace and Where
// predicate), 1-based, and fires on occurrences Nth .. Nth+Times-1, or on
// every occurrence from Nth on with Always. Defaults: Nth 1, Times 1.
type Rule struct {
	command   string
	anyCmd    bool
	namespace string
	nth       int
	times     int
	where     func(*Command) bool
	fault     Fault
	faultSet  bool
	nthSet    bool
	timesSet  bool

	count int64 // occurrences seen; guarded by the Script's mutex
}

// On starts a rule for the command named command (e.g. "insert",
// "update", "delete", "findAndModify"; see KnownCommands).
func On(command string) *Rule { return &Rule{command: command, nth: 1, times: 1} }

// OnAny starts a rule that matches every command (narrow it with In or
// Where).
func OnAny() *Rule { return &Rule{anyCmd: true, nth: 1, times: 1} }

// In restricts the rule to one namespace, "database.collection" (e.g. the
// dead-letter collection, so that it and the main collection can be
// faulted separately).
func (r *Rule) In(namespace string) *Rule { r.namespace = namespace; return r }

// Nth makes the rule fire first on the nth (1-based) matching command.
func (r *Rule) Nth(n int) *Rule { r.nth, r.nthSet = n, true; return r }

// Times makes the rule fire on n consecutive occurrences (n ≥ 1), or on
// every occurrence with Always.
func (r *Rule) Times(n int) *Rule { r.times, r.timesSet = n, true; return r }

// Always is Times(Always): fire on every occurrence from the Nth on.
func (r *Rule) Always() *Rule { return r.Times(Always) }

// Where adds a predicate over the parsed command; only commands for which
// it returns true match (and count as occurrences).
func (r *Rule) Where(pred func(*Command) bool) *Rule { r.where = pred; return r }

// Do sets the fault the rule applies.
func (r *Rule) Do(f Fault) *Rule { r.fault, r.faultSet = f, true; return r }

// String describes the rule's selection, e.g. "insert in app.users".
func (r *Rule) String() string {
	name := r.command
	if r.anyCmd {
		name = "any command"
	}
	if r.namespace != "" {
		name += " in " + r.namespace
	}
	return name
}

func validNamespace(ns string) bool {
	db, coll, ok := strings.Cut(ns, ".")
	return ok && db != "" && coll != ""
}

func (r *Rule) validate() error {
	switch {
	case !r.anyCmd && r.command == "":
		return errors.New("empty command name")
	case !r.anyCmd && !knownCommands[r.command]:
		return fmt.Errorf("unknown command name %q (see KnownCommands)", r.command)
	case r.namespace != "" && !validNamespace(r.namespace):
		return fmt.Errorf("namespace %q is not of the form database.collection", r.namespace)
	case r.nthSet && r.nth < 1:
		return fmt.Errorf("Nth(%d): occurrences are counted from 1", r.nth)
	case r.timesSet && r.times != Always && r.times < 1:
		return fmt.Errorf("Times(%d): count must be at least 1, or Always", r.times)
	case !r.faultSet:
		return errors.New("no fault: call Do")
	}
	if err := r.fault.validate(); err != nil {
		return err
	}
	if r.fault.kind == FaultDocument && !r.anyCmd && !hasStatements(r.command) {
		return fmt.Errorf("RejectDocuments applies to insert, update and delete, not %q", r.command)
	}
	if r.fault.kind == FaultShard && !r.anyCmd && !hasStatements(r.command) {
		return fmt.Errorf("FailShard applies to insert, update and delete, not %q", r.command)
	}
	return nil
}

func (r *Rule) matches(cmd *Command) bool {
	if !r.anyCmd && cmd.Name != r.command {
		return false
	}
	if r.namespace != "" && cmd.Namespace != r.namespace {
		return false
	}
	return r.where == nil || r.where(cmd)
}

// ScriptItem is an element of a Script: a *Rule or a Validator.
type ScriptItem interface {
	scriptItem()
}

func (*Rule) scriptItem() {}

// validatorItem declares an emulated collection validator.
type validatorItem struct {
	namespace string
	validator any
	opts      ValidationOptions
}

func (validatorItem) scriptItem() {}

// Validator declares an emulated $jsonSchema collection validator for a
// namespace ("database.collection"): documents of an insert into it that
// the validator rejects get a 121 DocumentValidationFailure write error
// with the server's errInfo and are not forwarded. validator is the
// collection's validator document, e.g. bson.D{{"$jsonSchema", ...}}, as
// bson.D, bson.M or bson.Raw.
func Validator(namespace string, validator any) ScriptItem {
	return validatorItem{namespace: namespace, validator: validator}
}

// Script is a set of rules and emulated validators. It is safe for
// concurrent use; one Script should be given to one Proxy (rules keep
// their occurrence counts in the Script).
type Script struct {
	mu         sync.Mutex
	rules      []*Rule
	validators map[string]*emulatedValidator
}

// NewScript checks and assembles a script. Rules are tried in order; of
// the rules whose occurrence window covers a command, the first fires
// (every matching rule still counts the occurrence). It returns an error
// naming the bad item for an unknown command name, a zero or negative
// Nth/Times, a missing or invalid fault, a bad namespace, a nil validator,
// a validator outside the emulated $jsonSchema subset (wrapping
// jsonschema.ErrUnsupported) or an invalid one, or two validators for one
// namespace.
func NewScript(items ...ScriptItem) (*Script, error) {
	s := &Script{validators: map[string]*emulatedValidator{}}
	for i, it := range items {
		switch x := it.(type) {
		case *Rule:
			if x == nil {
				return nil, fmt.Errorf("faultproxy: script item %d: nil rule", i)
			}
			if err := x.validate(); err != nil {
				return nil, fmt.Errorf("faultproxy: script item %d (rule for %s): %w", i, x, err)
			}
			rc := *x // the script keeps its own occurrence counts
			rc.count = 0
			s.rules = append(s.rules, &rc)
		case validatorItem:
			if !validNamespace(x.namespace) {
				return nil, fmt.Errorf("faultproxy: script item %d: validator namespace %q is not of the form database.collection", i, x.namespace)
			}
			if x.validator == nil {
				return nil, fmt.Errorf("faultproxy: script item %d: nil validator for %s", i, x.namespace)
			}
			if _, dup := s.validators[x.namespace]; dup {
				return nil, fmt.Errorf("faultproxy: script item %d: second validator for %s", i, x.namespace)
			}
			v, err := jsonschema.Compile(x.validator)
			if err != nil {
				return nil, fmt.Errorf("faultproxy: script item %d: validator for %s: %w", i, x.namespace, err)
			}
			opts := x.opts.withDefaults()
			if err := opts.check("", false); err != nil {
				return nil, fmt.Errorf("faultproxy: script item %d: validator for %s: %w", i, x.namespace, err)
			}
			s.validators[x.namespace] = &emulatedValidator{v: v, opts: opts}
		default:
			return nil, fmt.Errorf("faultproxy: script item %d: unknown item type %T", i, it)
		}
	}
	return s, nil
}

// MustScript is NewScript that panics on error, for tests.
func MustScript(items ...ScriptItem) *Script {
	s, err := NewScript(items...)
	if err != nil {
		panic(err)
	}
	return s
}

// fire counts cmd for every matching rule and returns the fault of the
// first rule whose window covers its occurrence.
func (s *Script) fire(cmd *Command) (Fault, bool) {
	if s == nil {
		return Fault{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		chosen Fault
		found  bool
	)
	for _, r := range s.rules {
		if !r.matches(cmd) {
			continue
		}
		r.count++
		if found || r.count < int64(r.nth) {
			continue
		}
		if r.times != Always && r.count >= int64(r.nth)+int64(r.times) {
			continue
		}
		if f, ok := r.fault.resolve(r.count - int64(r.nth) + 1); ok {
			chosen, found = f, true
		}
	}
	return chosen, found
}

func (s *Script) validator(ns string) *emulatedValidator {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validators[ns]
}

// reset zeroes the rules' occurrence counts.
func (s *Script) reset() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rules {
		r.count = 0
	}
}
