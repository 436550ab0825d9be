package policy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Extract turns an error returned by the driver for insertOne, insertMany
// or bulkWrite into Failures, one per failed document or write model
// (Index ≥ 0) and one for the whole command (Index == WholeCommand):
//
//   - mongo.BulkWriteException and mongo.WriteException: one Failure per
//     write error (writeErrors[i], Origin server, its index, errInfo,
//     keyPattern/keyValue, no labels) and one for the write concern error
//     (Origin write_concern, Ambiguous, with the exception's labels).
//   - mongo.CommandError: one whole-command Failure; Origin network when it
//     carries the NetworkError label, timeout when mongo.IsTimeout (which
//     includes MaxTimeMSExpired 50), server otherwise; errInfo,
//     keyPattern/keyValue and baseBackoffMS are read from the reply.
//   - context.Canceled, timeouts (context.DeadlineExceeded,
//     driver.ErrDeadlineWouldBeExceeded), network and server selection
//     errors without a server reply.
//   - client errors: marshal errors, nil documents, documents over the
//     maximum size, invalid arguments (Origin client, whole command; the
//     driver does not say which document).
//   - driver.ErrUnsupportedStorageEngine, which the driver returns in place
//     of the server's 20 IllegalOperation "Transaction numbers are only
//     allowed on a replica set member or mongos": Code 20.
//
// Every Failure gets its Shape (see ReplyShapes for what each proves): a
// NetworkError label means the command was written to a connection (lost
// reply: maybe applied), whatever else the error wraps; without it, a
// cancelled context, a passed deadline, a server selection failure and a
// connection checkout failure (cleared pool, wait-queue timeout, failed
// handshake) sent nothing. A whole-command ok: 0 is an interruption (maybe
// applied) when its code is in InterruptedCodes, rejected before it ran
// when its code is in RejectedCodes() (or a configuration or authorization
// code), and unproven (maybe applied: ShapeCommandUnproven) otherwise. The label NoWritesPerformed overrides any shape: nothing was
// written. Ambiguous is set when Proof() is MaybeApplied or
// AppliedUnconfirmed. RetryAfter is parsed from a Cosmos DB errmsg
// ("RetryAfterMs=8") or a baseBackoffMS field.
//
// Extract returns nil for a nil error. Every Failure keeps the driver
// error in Err, so nothing of it is lost.
func Extract(err error) []Failure {
	if err == nil {
		return nil
	}
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) {
		out := make([]Failure, 0, len(bwe.WriteErrors)+1)
		for _, we := range bwe.WriteErrors {
			out = append(out, writeErrorFailure(we.WriteError, err))
		}
		if bwe.WriteConcernError != nil {
			out = append(out, wceFailure(bwe.WriteConcernError, bwe.Labels, err))
		}
		if len(out) == 0 {
			out = append(out, Failure{Index: WholeCommand, Origin: OriginServer, Shape: ShapeCommandRejected, Labels: bwe.Labels, Message: err.Error(), Err: err})
		}
		return out
	}
	var we mongo.WriteException
	if errors.As(err, &we) {
		out := make([]Failure, 0, len(we.WriteErrors)+1)
		for _, e := range we.WriteErrors {
			out = append(out, writeErrorFailure(e, err))
		}
		if we.WriteConcernError != nil {
			out = append(out, wceFailure(we.WriteConcernError, we.Labels, err))
		}
		if len(out) == 0 {
			out = append(out, Failure{Index: WholeCommand, Origin: OriginServer, Shape: ShapeCommandRejected, Labels: we.Labels, Raw: we.Raw, Message: err.Error(), Err: err})
		}
		return out
	}
	return []Failure{commandFailure(err)}
}

func writeErrorFailure(we mongo.WriteError, err error) Failure {
	f := Failure{
		Index:   we.Index,
		Origin:  OriginServer,
		Shape:   writeErrorShape(int32(we.Code), we.Message),
		Code:    int32(we.Code),
		Message: we.Message,
		ErrInfo: we.Details,
		Raw:     we.Raw,
		Err:     err,
	}
	if we.Raw != nil {
		f.CodeName = lookupString(we.Raw, "codeName")
		f.KeyPattern = lookupDoc(we.Raw, "keyPattern")
		f.KeyValue = lookupDoc(we.Raw, "keyValue")
	}
	f.RetryAfter = retryAfter(f.Message, we.Raw)
	f.Ambiguous = f.Proof() == MaybeApplied
	return f
}

// writeErrorShape is WriteErrorShape read without knowing the deployment
// (as through mongos): the write loop reads it again with it.
func writeErrorShape(code int32, msg string) Shape {
	return WriteErrorShape(code, msg, false, nil)
}

func wceFailure(wce *mongo.WriteConcernError, labels []string, err error) Failure {
	f := Failure{
		Index:     WholeCommand,
		Origin:    OriginWriteConcern,
		Shape:     ShapeWriteConcernError,
		Code:      int32(wce.Code),
		CodeName:  wce.Name,
		Message:   wce.Message,
		Labels:    labels,
		ErrInfo:   wce.Details,
		Raw:       wce.Raw,
		Ambiguous: true,
		Err:       err,
	}
	f.RetryAfter = retryAfter(f.Message, wce.Raw)
	return f
}

func commandFailure(err error) Failure {
	f := Failure{Index: WholeCommand, Origin: OriginClient, Shape: ShapeUnrecognized, Message: err.Error(), Err: err}
	if clientError(err) {
		f.Shape = ShapeClient
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		f.Code, f.CodeName, f.Labels, f.Raw = ce.Code, ce.Name, ce.Labels, ce.Raw
		f.Message = ce.Message
		if f.Message == "" {
			f.Message = err.Error()
		}
		f.Origin = OriginServer
		if ce.Raw != nil {
			f.ErrInfo = lookupDoc(ce.Raw, "errInfo")
			f.KeyPattern = lookupDoc(ce.Raw, "keyPattern")
			f.KeyValue = lookupDoc(ce.Raw, "keyValue")
		}
		f.RetryAfter = retryAfter(f.Message, ce.Raw)
		f.Shape = serverShape(f.Code, f.Message)
	}
	f.Origin, f.Shape = clientSide(err, f)
	if f.Code == 0 && unsupportedStorageEngine(err) {
		f.Code, f.CodeName = 20, "IllegalOperation"
	}
	if f.HasLabel(LabelNoWritesPerformed) {
		f.Shape = ShapeNoWritesPerformed
	}
	f.Ambiguous = f.Proof() == MaybeApplied
	return f
}

// clientSide reads the origin and shape of an error the driver raised
// itself (no server reply, or a reply lost), in the order that makes each
// answer true: an error on a connection the command was written to carries
// the driver's NetworkError label, whatever else it wraps (a cancelled
// context, a deadline); without that label nothing was sent.
func clientSide(err error, f Failure) (Origin, Shape) {
	inFlight := f.HasLabel(LabelNetworkError)
	switch {
	case inFlight && (mongo.IsTimeout(err) || errors.Is(err, context.Canceled)):
		if errors.Is(err, context.Canceled) {
			return OriginContext, ShapeTimeoutInFlight
		}
		return OriginTimeout, ShapeTimeoutInFlight
	case inFlight:
		return OriginNetwork, ShapeNetworkInFlight
	case f.Origin == OriginServer && (f.Code != 0 || f.Raw != nil):
		// The server answered. MaxTimeMSExpired 50 also wraps the
		// context's deadline, but it is the server's interruption.
		if mongo.IsTimeout(err) {
			return OriginTimeout, f.Shape
		}
		return f.Origin, f.Shape
	case deadlineWouldBeExceeded(err):
		return OriginTimeout, ShapeTimeoutBeforeSend
	case serverSelection(err):
		return OriginNetwork, ShapeServerSelection
	case checkout(err):
		if mongo.IsTimeout(err) {
			return OriginTimeout, ShapeCheckout
		}
		return OriginNetwork, ShapeCheckout
	case errors.Is(err, context.Canceled):
		return OriginContext, ShapeContextBeforeSend
	case errors.Is(err, context.DeadlineExceeded):
		return OriginTimeout, ShapeTimeoutBeforeSend
	case unsupportedStorageEngine(err):
		return OriginServer, ShapeConfiguration
	}
	return f.Origin, f.Shape
}

// clientError reports the driver's client-side errors, raised before a
// command is built: nothing was sent.
func clientError(err error) bool {
	var me mongo.MarshalError
	var ia mongo.InvalidArgumentError
	var om mongo.ErrMapForOrderedArgument
	return errors.As(err, &me) || errors.As(err, &ia) || errors.As(err, &om) || errors.Is(err, mongo.ErrClientDisconnected) ||
		driverArgumentError(err.Error())
}

// driverArgumentErrors are the messages of the driver's argument checks
// that return a plain error, raised while it builds the command, before
// anything is sent (mongo-go-driver v2 mongo/mongo.go ensureDollarKey,
// ensureNoDollarKey): the message is their only sign.
var driverArgumentErrors = []string{
	"update document must contain key beginning with '$'",
	"update document must have at least one element",
	"replacement document cannot contain keys beginning with '$'",
}

func driverArgumentError(msg string) bool {
	for _, m := range driverArgumentErrors {
		if msg == m {
			return true
		}
	}
	return false
}

// serverShape is the shape of a whole-command ok: 0 reply with code.
func serverShape(code int32, msg string) Shape {
	switch {
	case inCodes(InterruptedCodes, code):
		return ShapeInterrupted
	case inCodes(DefaultConfigurationCodes, code), RetryableWritesUnsupported(code, msg):
		return ShapeConfiguration
	case inCodes(AuthorizationCodes, code):
		return ShapeAuthorization
	case inCodes(rejectedCodes, code), code == 16460 && strings.Contains(msg, " E11000 "):
		return ShapeCommandRejected
	}
	return ShapeCommandUnproven
}

func lookupString(doc bson.Raw, key string) string {
	v, err := doc.LookupErr(key)
	if err != nil {
		return ""
	}
	s, _ := v.StringValueOK()
	return s
}

func lookupDoc(doc bson.Raw, key string) bson.Raw {
	v, err := doc.LookupErr(key)
	if err != nil {
		return nil
	}
	d, ok := v.DocumentOK()
	if !ok {
		return nil
	}
	return d
}

// retryAfter returns the server-given delay: Cosmos DB's "RetryAfterMs=<n>"
// inside errmsg, else a numeric baseBackoffMS field of raw
// (client-backpressure spec), else 0.
func retryAfter(msg string, raw bson.Raw) time.Duration {
	const key = "RetryAfterMs="
	if i := strings.Index(msg, key); i >= 0 {
		digits := msg[i+len(key):]
		if end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); end >= 0 {
			digits = digits[:end]
		}
		if ms, err := strconv.ParseInt(digits, 10, 64); err == nil && ms > 0 {
			return time.Duration(ms) * time.Millisecond
		}
	}
	if raw != nil {
		if v, err := raw.LookupErr("baseBackoffMS"); err == nil {
			if ms, ok := v.AsInt64OK(); ok && ms > 0 {
				return time.Duration(ms) * time.Millisecond
			}
		}
	}
	return 0
}
