package engine

import (
	"testing"

	"github.com/writeguard/writeguard/policy"
)

func TestBisectBound(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 3, 4: 3, 5: 4, 16: 5, 17: 6, 100: 8, 1000: 11} {
		if got := BisectBound(n); got != want {
			t.Errorf("BisectBound(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestPoisonSuspect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     policy.Failure
		class policy.Class
		want  suspicion
	}{
		{"size rejection", policy.Failure{Shape: policy.ShapeCommandRejected, Code: 10334}, policy.Invalid, suspicion{true, true}},
		{"duplicate key as a command error", policy.Failure{Shape: policy.ShapeCommandRejected, Code: 11000}, policy.Conflict, suspicion{true, true}},
		{"connection dropped", policy.Failure{Shape: policy.ShapeNetworkInFlight}, policy.Transient, suspicion{possible: true}},
		{"interrupted", policy.Failure{Shape: policy.ShapeInterrupted, Code: 11600}, policy.Transient, suspicion{possible: true}},
		{"nothing sent", policy.Failure{Shape: policy.ShapeCheckout}, policy.Transient, suspicion{}},
		{"server selection", policy.Failure{Shape: policy.ShapeServerSelection}, policy.Transient, suspicion{}},
		{"overloaded", policy.Failure{Shape: policy.ShapeCommandRejected, Code: 462}, policy.Throttled, suspicion{}},
		{"configuration", policy.Failure{Shape: policy.ShapeConfiguration, Code: 20}, policy.Configuration, suspicion{}},
		{"authorization", policy.Failure{Shape: policy.ShapeAuthorization, Code: 13}, policy.Unknown, suspicion{}},
	} {
		if got := poisonSuspect(&tc.f, tc.class); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The one-statement rule reads a command rejection of one statement with
// a per-document verdict code as that statement's failure, and nothing
// else.
func TestOneStatement(t *testing.T) {
	e := New(Config{Classifier: policy.Default()})
	for _, tc := range []struct {
		name string
		n    int
		f    policy.Failure
		want bool
	}{
		{"findAndModify 121", 1, policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeCommandRejected, Code: 121}, true},
		{"findAndModify 11000", 1, policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeCommandRejected, Code: 11000}, true},
		{"one document 10334", 1, policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeCommandRejected, Code: 10334}, true},
		{"two statements 121", 2, policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeCommandRejected, Code: 121}, false},
		{"interruption", 1, policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeInterrupted, Code: 11600}, false},
		{"unknown code", 1, policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeCommandRejected, Code: 8000}, false},
		{"network", 1, policy.Failure{Index: policy.WholeCommand, Shape: policy.ShapeNetworkInFlight}, false},
	} {
		c := e.newCall("findOneAndUpdate", true, tc.n)
		f := tc.f
		got := c.oneStatement(c.items, &f)
		if got != tc.want || got && f.Index != 0 || !got && f.Index != policy.WholeCommand {
			t.Errorf("%s: %v (index %d), want %v", tc.name, got, f.Index, tc.want)
		}
	}
}
