package replay

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/internal/readback"
	"github.com/writeguard/writeguard/policy"
)

// codeDocumentValidationFailure is the server's code for a document its
// validator rejects (DocumentValidationFailure in mongodb/mongo
// src/mongo/base/error_codes.yml); isInvalid also counts the envelope's
// own code.
const codeDocumentValidationFailure = 121

// classify sets each sent entry's outcome from the target's answer: a
// *writeguard.Report (per-document dispositions) or a driver error (per
// index write errors; an error for the whole command, a network error
// say, fails every entry without one of its own).
func classify(send []*entry, err error) {
	if err == nil {
		for _, e := range send {
			e.out = outReplayed
		}
		return
	}
	var rep *writeguard.Report
	if errors.As(err, &rep) && len(rep.Outcomes) == len(send) {
		classifyReport(send, rep)
		return
	}
	classifyDriverError(send, err)
}

// classifyReport reads the per-document dispositions of a guarded target.
func classifyReport(send []*entry, rep *writeguard.Report) {
	for i, o := range rep.Outcomes {
		e := send[i]
		f := o.Failure
		if f != nil {
			e.code, e.codeName, e.reason = f.Code, f.CodeName, failureReason(f)
			e.docErr = f.Shape == policy.ShapeWriteError
			e.ambiguous = f.Ambiguous
		}
		switch d := o.Disposition; {
		case f != nil && f.Shape == policy.ShapeWriteErrorMulti:
			// A multi statement refused part way (C70): it may have
			// changed documents; held as ambiguous, never counted as
			// rejected.
			e.out, e.ambiguous = outFailed, true
			e.reason = "disposition " + string(d) + ": " + e.reason
		case d == writeguard.Written || d == writeguard.AlreadyWritten || d == writeguard.ConflictReplaced:
			e.out = outReplayed
		case d == writeguard.DeadLettered:
			e.out = outInvalidByTarget
		case f != nil && isInvalid(*f, e):
			e.out = outInvalid
		case f != nil && policy.IsDuplicateKey(*f), d.IsConflict() && f != nil:
			e.out = outDuplicate
		default:
			e.out = outFailed
			if e.reason == "" {
				e.reason = "disposition " + string(d)
			} else {
				e.reason = "disposition " + string(d) + ": " + e.reason
			}
			if o.Err != nil {
				e.reason += ": " + o.Err.Error()
			}
		}
	}
}

// classifyDriverError reads a driver error: write errors by index, and a
// write concern or whole-command error for the entries without one.
func classifyDriverError(send []*entry, err error) {
	fails := policy.Extract(err)
	perDoc := map[int]*policy.Failure{}
	var whole *policy.Failure
	for i := range fails {
		f := &fails[i]
		if f.Index >= 0 && f.Index < len(send) && f.Origin != policy.OriginWriteConcern {
			perDoc[f.Index] = f
		} else if whole == nil {
			whole = f
		}
	}
	if whole != nil && whole.ProofAfter(hiddenAttempts(send)) == policy.MaybeApplied {
		whole.Ambiguous = true
	}
	for i, e := range send {
		f := multiStatement(perDoc[i], e)
		switch {
		case f != nil && f.Shape == policy.ShapeWriteErrorMulti:
			e.out, e.code, e.codeName, e.reason = outFailed, f.Code, f.CodeName, failureReason(f)
			e.docErr, e.ambiguous = true, true
		case f != nil && isInvalid(*f, e):
			e.out, e.code, e.codeName, e.reason = outInvalid, f.Code, f.CodeName, failureReason(f)
		case f != nil && policy.IsDuplicateKey(*f):
			e.out, e.code, e.codeName, e.reason = outDuplicate, f.Code, f.CodeName, failureReason(f)
		case f != nil:
			e.out, e.code, e.codeName, e.reason = outFailed, f.Code, f.CodeName, failureReason(f)
			e.docErr = f.Shape == policy.ShapeWriteError
			e.ambiguous = f.Ambiguous
		case whole != nil:
			// A write concern error (applied, not confirmed) or a
			// whole-command error: the next run resolves it by _id.
			e.out, e.code, e.codeName, e.reason = outFailed, whole.Code, whole.CodeName, failureReason(whole)
			e.ambiguous = whole.Ambiguous
		default:
			e.out = outReplayed
		}
	}
}

// hiddenAttempts reports whether an earlier attempt of the driver's
// BulkWrite may hide behind its error: the driver retries a command of
// single statements (retryable writes, on by default; replay cannot read
// the client's setting nor the deployment, so it assumes them on), and
// its error then describes the last attempt only (policy.ReplyShape.Hidden:
// a deadline before a retry's send, a cleared pool at its checkout, an
// overload reply labelled NoWritesPerformed, mongo-go-driver v2.10.0
// x/mongo/driver/operation.go 747-750, 818-822, 691-703, 637-646). Only
// a group of multi statements alone (UpdateManyModel, DeleteManyModel:
// mongo/bulk_write.go createBatches leaves their batches unretryable) has
// none. The same rule as the engine's (internal/engine/hidden.go).
func hiddenAttempts(send []*entry) bool {
	for _, e := range send {
		switch e.model.(type) {
		case *mongo.UpdateManyModel, *mongo.DeleteManyModel:
		default:
			return true
		}
	}
	return false
}

// multiStatement returns f read as policy.ShapeWriteErrorMulti when e is
// a multi statement (UpdateManyModel, DeleteManyModel) and f its write
// error: the statement may have changed documents before the one refused
// (write_ops_exec.cpp handleError keeps them; C70), so it is never
// "rejected again" nor replayed as if nothing happened. f otherwise.
func multiStatement(f *policy.Failure, e *entry) *policy.Failure {
	if f == nil || f.Shape != policy.ShapeWriteError && f.Shape != policy.ShapeWriteErrorUnproven {
		return f
	}
	switch e.model.(type) {
	case *mongo.UpdateManyModel, *mongo.DeleteManyModel:
		cp := *f
		cp.Shape, cp.Ambiguous = policy.ShapeWriteErrorMulti, true
		return &cp
	}
	return f
}

// isInvalid reports whether f rejects the document as invalid: 121, or
// the envelope's own (non-duplicate-key) code.
func isInvalid(f policy.Failure, e *entry) bool {
	return f.Code == codeDocumentValidationFailure || (f.Code != 0 && f.Code == e.env.Code && !policy.IsDuplicateKey(f))
}

func failureReason(f *policy.Failure) string {
	s := f.Message
	if f.Code != 0 {
		s = fmt.Sprintf("%d %s: %s", f.Code, f.CodeName, f.Message)
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// resolveDuplicates reads back, in one query, the inserts that hit a
// duplicate key: a stored document with the same _id that equals the
// original (or whose _id writeguard assigned) is this payload, written
// earlier: replayed. Anything else is a conflict.
func resolveDuplicates(ctx context.Context, target writeguard.Collection, send []*entry) {
	var dups []*entry
	ids := bson.A{}
	for _, e := range send {
		if e.out != outDuplicate {
			continue
		}
		if !e.insert || e.docID.Type == 0 {
			e.out = outConflict
			continue
		}
		dups = append(dups, e)
		ids = append(ids, e.docID)
	}
	if len(dups) == 0 {
		return
	}
	found, err := readBack(ctx, target, ids)
	if err != nil {
		for _, e := range dups {
			e.out = outFailed
			e.reason = "duplicate key; reading the target back failed: " + err.Error()
		}
		return
	}
	for _, e := range dups {
		doc, ok := found[readback.Key(e.docID)]
		switch {
		case ok && (policy.SameDocument(doc, e.env.Original) || e.env.IDAssigned):
			e.out = outReplayedDup
		case ok:
			e.out = outConflict
			e.reason = "duplicate key: the target holds another document with this _id"
		case found == nil:
			e.out = outConflict
			e.reason = "duplicate key; the target cannot be read back (no Find): " + e.reason
		default:
			e.out = outConflict
			e.reason = "duplicate key on another unique index: " + e.reason
		}
	}
}

// readBack returns the target's documents with these _ids keyed by
// readback.Key, or nil (no error) when the target cannot be read. It reads
// what the primary holds (read preference primary, read concern local),
// whatever the target's settings, as writeguard's own read-backs do.
func readBack(ctx context.Context, target writeguard.Collection, ids bson.A) (map[string]bson.Raw, error) {
	var fd readback.Finder
	switch t := target.(type) {
	case interface{ Target() writeguard.Target }:
		fd = t.Target()
	case readback.Finder:
		fd = t
	default:
		return nil, nil
	}
	return readback.ByID(ctx, readback.PrimaryReads(fd), ids)
}
