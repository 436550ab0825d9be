package writeguard

import (
	"reflect"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// appendCauses appends to out the errors Report.Unwrap gives after the
// sentinels: the driver errors of the unhandled inputs (conflicts first),
// their handling errors, the call's own errors, then the handled inputs'
// errors. Stored inputs give none.
func (r *Report) appendCauses(out []error) []error {
	var causes errorSet
	for pass := 0; pass < 2; pass++ {
		for i := range r.Outcomes {
			o := &r.Outcomes[i]
			if o.Disposition.Handled() || (pass == 0) != (o.Disposition == Conflicted) {
				continue
			}
			if o.Failure != nil {
				causes.add(o.Failure.Err)
			}
		}
	}
	for i := range r.Outcomes {
		if o := &r.Outcomes[i]; !o.Disposition.Handled() {
			causes.add(o.Err)
		}
	}
	for _, e := range r.extra {
		causes.add(e)
	}
	for i := range r.Outcomes {
		o := &r.Outcomes[i]
		if !o.Disposition.Handled() || o.Disposition.Stored() {
			continue
		}
		if o.Failure != nil {
			causes.add(o.Failure.Err)
		}
		causes.add(o.Err)
	}
	return append(out, causes.errs...)
}

// errorSet is a list of distinct errors. The inputs of one command share
// its driver error as copies of one value (a mongo.BulkWriteException is a
// struct holding slices, which == cannot compare), so identity is
// shallow: same dynamic type, and fields equal as values or, for slices,
// maps and pointers, as the same memory (sameShallow).
type errorSet struct {
	errs []error
	last int // index of the last match: the inputs of a batch are adjacent
}

func (s *errorSet) add(e error) {
	if e == nil {
		return
	}
	if s.last < len(s.errs) && sameError(s.errs[s.last], e) {
		return
	}
	for i, have := range s.errs {
		if sameError(have, e) {
			s.last = i
			return
		}
	}
	s.last = len(s.errs)
	s.errs = append(s.errs, e)
}

// sameError reports whether a and b are the same error value, copies
// included, without ever comparing an uncomparable value with ==. The
// driver's write errors are compared field by field directly (a Report of
// 100,000 inputs compares as many times); any other type by reflection
// (sameShallow).
func sameError(a, b error) bool {
	switch x := a.(type) {
	case mongo.BulkWriteException:
		y, ok := b.(mongo.BulkWriteException)
		return ok && x.WriteConcernError == y.WriteConcernError &&
			sameSlice(x.WriteErrors, y.WriteErrors) && sameSlice(x.Labels, y.Labels)
	case mongo.WriteException:
		y, ok := b.(mongo.WriteException)
		return ok && x.WriteConcernError == y.WriteConcernError && sameSlice(x.WriteErrors, y.WriteErrors) &&
			sameSlice(x.Labels, y.Labels) && sameSlice(x.Raw, y.Raw)
	}
	return sameShallow(reflect.ValueOf(a), reflect.ValueOf(b), 0)
}

// sameSlice reports whether a and b are the same memory: the same length
// and, when not empty, the same first element.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sameShallow compares a and b: values of basic kinds by value, slices,
// maps, pointers, channels and functions by identity (the same memory and
// length), structs, arrays and interfaces field by field, at most 8
// levels of interfaces and structs deep (deeper counts as different).
func sameShallow(a, b reflect.Value, depth int) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() || depth > 8 {
		return false
	}
	switch a.Kind() {
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	case reflect.Slice:
		return a.Len() == b.Len() && (a.Len() == 0 || a.Pointer() == b.Pointer())
	case reflect.Map, reflect.Pointer, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return a.Pointer() == b.Pointer()
	case reflect.Interface:
		return a.IsNil() == b.IsNil() && (a.IsNil() || sameShallow(a.Elem(), b.Elem(), depth+1))
	case reflect.Array:
		for i := 0; i < a.Len(); i++ {
			if !sameShallow(a.Index(i), b.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !sameShallow(a.Field(i), b.Field(i), depth+1) {
				return false
			}
		}
		return true
	}
	return false
}
