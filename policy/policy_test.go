package policy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// TestDefaultTable covers every code and label of DESIGN §2, both as a
// top-level error and as a write error, through the real driver.
func TestDefaultTable(t *testing.T) {
	cases := []struct {
		codes []int32
		class policy.Class
	}{
		{[]int32{6, 7, 89, 91, 112, 134, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 24, 10058}, policy.Transient},
		{[]int32{462, 16500}, policy.Throttled},
		{[]int32{121, 2, 14, 10334, 17280, 16755}, policy.Invalid},
		{[]int32{11000, 11001, 12582}, policy.Conflict},
		{[]int32{20, 79, 100}, policy.Configuration},
		{[]int32{1, 11601, 64, 50, 8000, 13, 251, 433}, policy.Unknown},
	}
	table := policy.Default()
	for _, c := range cases {
		for _, code := range c.codes {
			top := fmt.Sprintf(`{"ok":0,"code":%d,"codeName":"X","errmsg":"e"}`, code)
			we := fmt.Sprintf(`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":%d,"errmsg":"e"}]}`, code)
			for _, r := range []string{top, we} {
				want := c.class
				if code == 50 && r == top {
					want = policy.Transient // MaxTimeMSExpired is a timeout (mongo.IsTimeout)
				}
				if code == 20 && r == we {
					want = policy.Configuration
				}
				got := classify(t, table, r)
				if got != want {
					t.Errorf("code %d in %s: %s, want %s", code, r, got, want)
				}
			}
		}
	}
	labelled := []struct {
		reply string
		class policy.Class
	}{
		{`{"ok":0,"code":1,"errmsg":"e","errorLabels":["RetryableWriteError"]}`, policy.Transient},
		{`{"ok":0,"code":1,"errmsg":"e","errorLabels":["TransientTransactionError"]}`, policy.Transient},
		{`{"ok":0,"code":1,"errmsg":"e","errorLabels":["SystemOverloadedError","RetryableError"]}`, policy.Throttled},
		{`{"ok":0,"code":91,"errmsg":"e","errorLabels":["SystemOverloadedError"]}`, policy.Unknown},
		{`{"ok":0,"code":121,"errmsg":"e","errorLabels":["RetryableWriteError"]}`, policy.Transient},
		{`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":121,"errmsg":"e","errInfo":{"details":{"code":2,"codeName":"BadValue"}}}]}`, policy.Invalid},
		{`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":16460,"errmsg":"mongos: E11000 duplicate key error "}]}`, policy.Conflict},
		{`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":16460,"errmsg":"something else"}]}`, policy.Unknown},
	}
	for _, l := range labelled {
		if got := classify(t, table, l.reply); got != l.class {
			t.Errorf("%s: %s, want %s", l.reply, got, l.class)
		}
	}
}

func classify(t *testing.T, c policy.Classifier, reply string) policy.Class {
	t.Helper()
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(reply), false, &raw); err != nil {
		t.Fatal(err)
	}
	fails := policy.Extract(mocks.ReplyError(mocks.OpInsertMany, raw))
	if len(fails) != 1 {
		t.Fatalf("%s: %d failures", reply, len(fails))
	}
	return c.Classify(fails[0])
}

func TestExtractClientErrors(t *testing.T) {
	deadline, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	cases := []struct {
		name      string
		err       error
		origin    policy.Origin
		class     policy.Class
		ambiguous bool
	}{
		{"network", mocks.NetworkError(mocks.OpInsertMany), policy.OriginNetwork, policy.Transient, true},
		// Without the driver's NetworkError label a cancelled context or a
		// passed deadline stopped the call before anything was sent.
		{"canceled", fmt.Errorf("write: %w", context.Canceled), policy.OriginContext, policy.Transient, false},
		{"deadline", deadline.Err(), policy.OriginTimeout, policy.Transient, false},
		{"canceled in flight", mongo.CommandError{Labels: []string{"NetworkError"}, Wrapped: context.Canceled}, policy.OriginContext, policy.Transient, true},
		{"pool cleared", mocks.PoolClearedError{Address: "h:1"}, policy.OriginNetwork, policy.Transient, false},
		// An error of no shape the driver produces proves nothing.
		{"unrecognized", errors.New("a custom target's error"), policy.OriginClient, policy.Unknown, true},
		{"marshal", mongo.MarshalError{Value: 1, Err: errors.New("bad")}, policy.OriginClient, policy.Unknown, false},
		{"nil document", mongo.ErrNilDocument, policy.OriginClient, policy.Unknown, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := policy.Extract(c.err)
			if len(fs) != 1 {
				t.Fatalf("%d failures", len(fs))
			}
			f := fs[0]
			if f.Origin != c.origin || f.Ambiguous != c.ambiguous || f.Index != policy.WholeCommand {
				t.Errorf("origin %s ambiguous %v index %d; want %s %v whole", f.Origin, f.Ambiguous, f.Index, c.origin, c.ambiguous)
			}
			if got := policy.Default().Classify(f); got != c.class {
				t.Errorf("class %s, want %s", got, c.class)
			}
			if f.Err == nil || f.Err.Error() != c.err.Error() {
				t.Error("driver error not kept")
			}
		})
	}
	if fs := policy.Extract(nil); fs != nil {
		t.Errorf("Extract(nil) = %v", fs)
	}
	// A client-side failure of one document (prepared by writeguard) is Invalid.
	if got := policy.Default().Classify(policy.Failure{Index: 3, Origin: policy.OriginClient}); got != policy.Invalid {
		t.Errorf("per-document client failure: %s, want invalid", got)
	}
}

func TestChainFirstAnswerWins(t *testing.T) {
	calls := 0
	never := policy.ClassifierFunc(func(policy.Failure) policy.Class { calls++; return policy.Unknown })
	dup := policy.ClassifierFunc(func(f policy.Failure) policy.Class {
		if f.Code == 11000 {
			return policy.Invalid
		}
		return policy.Unknown
	})
	ch := policy.Chain(never, nil, dup, policy.Default())
	if got := ch.Classify(policy.Failure{Code: 11000}); got != policy.Invalid {
		t.Errorf("user classifier overridden: %s", got)
	}
	if got := ch.Classify(policy.Failure{Code: 91}); got != policy.Transient {
		t.Errorf("table not consulted: %s", got)
	}
	if calls != 2 {
		t.Errorf("first classifier asked %d times, want 2", calls)
	}
	if got := policy.Chain().Classify(policy.Failure{Code: 91}); got != policy.Unknown {
		t.Errorf("empty chain: %s", got)
	}
	cosmos := policy.CosmosDB()
	if got := cosmos.Classify(policy.Failure{Code: 50}); got != policy.Transient {
		t.Errorf("CosmosDB 50: %s", got)
	}
	if got := policy.Default().Classify(policy.Failure{Code: 50}); got != policy.Unknown {
		t.Errorf("Default changed by CosmosDB: 50 is %s", got)
	}
}

func TestClassifyAllocatesNothing(t *testing.T) {
	table := policy.Default()
	f := policy.Failure{Code: 91, Labels: []string{"RetryableWriteError"}, Message: "x"}
	if n := testing.AllocsPerRun(100, func() { _ = table.Classify(f) }); n != 0 {
		t.Errorf("Classify allocates %v times", n)
	}
}

func TestClassString(t *testing.T) {
	want := map[policy.Class]string{policy.Unknown: "unknown", policy.Transient: "transient", policy.Throttled: "throttled",
		policy.Invalid: "invalid", policy.Conflict: "conflict", policy.Configuration: "configuration", policy.Class(99): "class(99)"}
	for c, s := range want {
		if c.String() != s {
			t.Errorf("%d: %q, want %q", c, c.String(), s)
		}
	}
}

func TestBackoffSchedule(t *testing.T) {
	seq := []float64{0, 0.5, 0.999, 0.25, 0.5, 0.5, 0.5}
	i := 0
	b := policy.Backoff{Base: 100 * time.Millisecond, Cap: 1 * time.Second, Multiplier: 2, Jitter: func() float64 { i++; return seq[i-1] }}
	var got []time.Duration
	for n := 1; n <= 7; n++ {
		got = append(got, b.Delay(n))
	}
	want := []time.Duration{0, 100 * time.Millisecond, 399600 * time.Microsecond, 200 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schedule (-want +got):\n%s", diff)
	}
	if c := b.Ceiling(1000); c != time.Second {
		t.Errorf("Ceiling(1000) = %v, want the cap", c)
	}
	bad := []policy.Backoff{{Base: -1}, {Base: time.Second, Cap: time.Millisecond}, {Multiplier: 0.5}, {MaxAttempts: -1}}
	for _, b := range bad {
		if err := b.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil", b)
		}
	}
	if err := (policy.Backoff{}).Validate(); err != nil {
		t.Errorf("zero Backoff (all defaults) invalid: %v", err)
	}
}

// In a testing/synctest bubble the real clock and the context's deadline
// move together: the wait that would pass the deadline returns at once,
// the one inside it sleeps its full delay.
func TestBudget(t *testing.T) {
	b, err := policy.NewBudget(10, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for i := 0; i < 20; i++ {
		if b.Allow() {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("%d retries allowed from a full bucket of 10, want 5 (down to half)", allowed)
	}
	b.Success()
	b.Success()
	if !b.Allow() {
		t.Error("two successes at 0.5 did not refund one retry")
	}
	var nilB *policy.Budget
	if !nilB.Allow() {
		t.Error("a nil budget refused a retry")
	}
	nilB.Success()
	for _, bad := range [][2]float64{{0, 0.1}, {1001, 0.1}, {10, 0}, {10, 1.5}} {
		if _, err := policy.NewBudget(bad[0], bad[1]); err == nil {
			t.Errorf("NewBudget(%v) accepted", bad)
		}
	}
	// Concurrent use never goes below half.
	b = policy.DefaultBudget()
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if b.Allow() {
					mu.Lock()
					n++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if n != 50 {
		t.Errorf("%d concurrent retries allowed, want 50", n)
	}
}

func TestRefusedWait(t *testing.T) {
	b := policy.Backoff{Jitter: func() float64 { return 0.5 }}.WithDefaults() // 5 attempts
	// Retries 1..4 would have waited 50, 100, 200 and 400 ms.
	if got := b.RefusedWait(1, 5); got != 750*time.Millisecond {
		t.Errorf("RefusedWait(1, 5) = %v, want 750ms", got)
	}
	if got := b.RefusedWait(3, 5); got != 600*time.Millisecond {
		t.Errorf("RefusedWait(3, 5) = %v, want 600ms", got)
	}
	// A limit above MaxAttempts (a throttled failure) counts as MaxAttempts;
	// a refused last retry still waits its own backoff.
	if got := b.RefusedWait(1, 1<<30); got != 750*time.Millisecond {
		t.Errorf("RefusedWait(1, huge) = %v, want 750ms", got)
	}
	if got := b.RefusedWait(4, 4); got != 400*time.Millisecond {
		t.Errorf("RefusedWait(4, 4) = %v, want 400ms", got)
	}
}
