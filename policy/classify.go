package policy

import "strings"

// Classifier decides the Class of a Failure.
//
// Classify must be safe for concurrent use, must not block, and should not
// allocate: it runs for every failed document. Return Unknown to let the
// next classifier of a Chain decide.
type Classifier interface {
	Classify(f Failure) Class
}

// ClassifierFunc adapts a function to the Classifier interface.
type ClassifierFunc func(f Failure) Class

// Classify returns fn(f).
func (fn ClassifierFunc) Classify(f Failure) Class { return fn(f) }

// Chain returns a Classifier that asks each classifier in order and returns
// the first answer that is not Unknown, or Unknown when none answers. Nil
// entries are skipped. writeguard puts the user's classifiers before
// Default() (see writeguard.WithClassifier), so users refine the table
// rather than replace it.
func Chain(cs ...Classifier) Classifier {
	list := make([]Classifier, 0, len(cs))
	for _, c := range cs {
		if c != nil {
			list = append(list, c)
		}
	}
	return chain(list)
}

type chain []Classifier

func (ch chain) Classify(f Failure) Class {
	for _, c := range ch {
		if cl := c.Classify(f); cl != Unknown {
			return cl
		}
	}
	return Unknown
}

// CodeSet is a set of server error codes. The zero value is an empty set
// that panics on Add; make one with Codes.
type CodeSet map[int32]struct{}

// Codes returns a CodeSet holding codes.
func Codes(codes ...int32) CodeSet {
	s := make(CodeSet, len(codes))
	s.Add(codes...)
	return s
}

// Add puts codes into the set.
func (s CodeSet) Add(codes ...int32) {
	for _, c := range codes {
		s[c] = struct{}{}
	}
}

// Remove takes codes out of the set.
func (s CodeSet) Remove(codes ...int32) {
	for _, c := range codes {
		delete(s, c)
	}
}

// Has reports whether code is in the set. A nil set has no codes.
func (s CodeSet) Has(code int32) bool {
	_, ok := s[code]
	return ok
}

// Default code sets. Default() copies them, so changing a Table never
// changes these. Sources: the retryable-writes spec's code list,
// the client-backpressure spec, mongodb/mongo src/mongo/base/error_codes.yml.
var (
	// DefaultTransientCodes: HostUnreachable 6, HostNotFound 7,
	// NetworkTimeout 89, ShutdownInProgress 91, WriteConflict 112,
	// ReadConcernMajorityNotAvailableYet 134, PrimarySteppedDown 189,
	// ExceededTimeLimit 262, SocketException 9001, LegacyNotPrimary 10058,
	// NotWritablePrimary 10107, InterruptedAtShutdown 11600,
	// InterruptedDueToReplStateChange 11602, NotPrimaryNoSecondaryOk 13435,
	// NotPrimaryOrSecondary 13436, LockTimeout 24, StaleConfig 13388 (a
	// shard refused the statement before running it for a stale routing
	// table: policy.VerdictCodes). The retryable-writes spec's list plus
	// WriteConflict, LockTimeout, LegacyNotPrimary and StaleConfig.
	DefaultTransientCodes = []int32{6, 7, 24, 89, 91, 112, 134, 189, 262, 9001, 10058, 10107, 11600, 11602, 13388, 13435, 13436}
	// DefaultThrottledCodes: IngressRequestRateLimitExceeded 462 (MongoDB
	// 8.2+) and Azure Cosmos DB's 16500 (TooManyRequests, 429).
	DefaultThrottledCodes = []int32{462, 16500}
	// DefaultInvalidCodes: DocumentValidationFailure 121, BadValue 2,
	// TypeMismatch 14, BSONObjectTooLarge 10334, KeyTooLong 17280,
	// 16755 (invalid geo key: "Can't extract geo keys"). Deterministic: the
	// same document fails again.
	DefaultInvalidCodes = []int32{2, 14, 121, 10334, 16755, 17280}
	// DefaultConflictCodes: DuplicateKey 11000, 11001 (legacy duplicate key
	// on update), 12582 (duplicate key in a capped collection, SERVER-7164).
	// 16460 counts too when its message contains " E11000 " (mongos,
	// SERVER-11493), as in mongo.IsDuplicateKeyError.
	DefaultConflictCodes = []int32{11000, 11001, 12582}
	// DefaultConfigurationCodes: IllegalOperation 20 (retryable writes on a
	// standalone), UnknownReplWriteConcern 79, UnsatisfiableWriteConcern
	// 100.
	DefaultConfigurationCodes = []int32{20, 79, 100}
)

// Table is the default classifier: fixed rules for the failure's origin
// and labels, then code sets users can extend. Its rules, in order:
//
//  1. A client-side failure of one document (marshal error, nil document,
//     document over 16 MiB) is Invalid; a client-side failure of the whole
//     call is Unknown.
//  2. Network errors, timeouts and a cancelled context are Transient (the
//     retry loop stops on its own when the context is done).
//  3. A whole-command reply saying the server does not support retryable
//     writes (RetryableWritesUnsupported: Azure Cosmos DB's code 2, Amazon
//     DocumentDB's 301) is Configuration, whatever its code's class.
//  4. Label SystemOverloadedError: Throttled when RetryableError is also
//     present (a "retryable overload error", client-backpressure spec),
//     otherwise Unknown, because the server said the command is not safe to
//     retry.
//  5. Labels RetryableWriteError (retryable-writes spec) and
//     TransientTransactionError are Transient.
//  6. Codes, in this order: Conflict (and 16460 with " E11000 "), Invalid,
//     Configuration, Throttled, Transient.
//  7. Everything else is Unknown: never retried.
//
// A class is about the failure; what it means for the documents also
// depends on the failure's Shape: Route never dead-letters or hands to a
// conflict handler on a whole-command failure, whatever its class.
//
// Codes inside errInfo (a 121's nested {code: 2} for a throwing $expr) are
// never read: only the failure's own code counts.
//
// A Table must not be changed while it is in use; Classify is safe for
// concurrent use and does not allocate.
type Table struct {
	// Transient codes are retried with backoff (DefaultTransientCodes).
	Transient CodeSet
	// Throttled codes wait for the server's delay (DefaultThrottledCodes).
	Throttled CodeSet
	// Invalid codes are dead-lettered (DefaultInvalidCodes).
	Invalid CodeSet
	// Conflict codes go to the conflict handler (DefaultConflictCodes).
	Conflict CodeSet
	// Configuration codes fail the call at once
	// (DefaultConfigurationCodes).
	Configuration CodeSet
}

// Default returns a new Table holding the default code sets (see the
// Default*Codes variables). Each call returns a fresh copy, so extending it
// changes nothing else:
//
//	t := policy.Default()
//	t.Transient.Add(50) // MaxTimeMSExpired
func Default() *Table {
	return &Table{
		Transient:     Codes(DefaultTransientCodes...),
		Throttled:     Codes(DefaultThrottledCodes...),
		Invalid:       Codes(DefaultInvalidCodes...),
		Conflict:      Codes(DefaultConflictCodes...),
		Configuration: Codes(DefaultConfigurationCodes...),
	}
}

// CosmosDB returns Default() adjusted for Azure Cosmos DB for MongoDB:
// MaxTimeMSExpired 50 is Transient (Cosmos answers 50 after its
// server-side retry of a throttled request gives up after 60 s). 16500 is
// Throttled already. Cosmos DB needs retryWrites=false, so writeguard's own
// _id assignment is what makes its retries idempotent.
func CosmosDB() *Table {
	t := Default()
	t.Transient.Add(50)
	return t
}

// Classify implements Classifier with the rules in the Table's doc.
func (t *Table) Classify(f Failure) Class {
	switch f.Origin {
	case OriginClient:
		if f.Index >= 0 {
			return Invalid
		}
		if t.Configuration.Has(f.Code) {
			return Configuration
		}
		return Unknown
	case OriginNetwork, OriginTimeout, OriginContext:
		return Transient
	}
	if f.Index == WholeCommand && RetryableWritesUnsupported(f.Code, f.Message) {
		return Configuration
	}
	if f.HasLabel(LabelSystemOverloaded) {
		if f.HasLabel(LabelRetryable) {
			return Throttled
		}
		return Unknown
	}
	if f.HasLabel(LabelRetryableWriteError) || f.HasLabel(LabelTransientTransaction) {
		return Transient
	}
	switch {
	case t.Conflict.Has(f.Code), wrappedDuplicateKey(f):
		return Conflict
	case t.Invalid.Has(f.Code):
		return Invalid
	case t.Configuration.Has(f.Code):
		return Configuration
	case t.Throttled.Has(f.Code):
		return Throttled
	case t.Transient.Has(f.Code):
		return Transient
	}
	return Unknown
}

// RetryableWritesUnsupported reports whether a whole-command reply (code,
// errmsg) says that the server does not support retryable writes and the
// client must turn them off: Azure Cosmos DB for MongoDB answers code 2
// BadValue "Retryable writes are not supported. Please disable retryable
// writes by specifying "retrywrites=false" ..." and Amazon DocumentDB 301
// "Retryable writes are not supported". The reply names a client setting,
// so its code is not a verdict on the documents. This is the one place the
// classifier reads message text, because these servers give no other
// sign.
func RetryableWritesUnsupported(code int32, msg string) bool {
	if code != 2 && code != 301 {
		return false
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "retryable writes are not supported") || strings.Contains(m, "retrywrites=false")
}
