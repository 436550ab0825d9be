package policy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/writeguard/writeguard/policy"
)

// driverLines pins the driver lines that policy.ReplyShapes's Hidden rows
// and internal/engine's hidden-attempt and monitor rules cite
// (mongo-go-driver v2.10.0): a driver upgrade that moves or changes one
// of them fails here, and the citations (and the rules) must be read
// again. The overload-retry API is announced to change.
var driverLines = []struct {
	file string
	line int
	want string
}{
	{"x/mongo/driver/operation.go", 583, "resetForRetry := func(err error) error {"},
	{"x/mongo/driver/operation.go", 585, "prevErr = err"},
	{"x/mongo/driver/operation.go", 639, "time.Until(deadline) < backoff"},
	{"x/mongo/driver/operation.go", 640, "return err"},
	{"x/mongo/driver/operation.go", 644, "case <-ctx.Done():"},
	{"x/mongo/driver/operation.go", 646, "return err"},
	{"x/mongo/driver/operation.go", 671, "errors.Is(prevErr, context.Canceled) || errors.Is(prevErr, context.DeadlineExceeded)"},
	{"x/mongo/driver/operation.go", 672, "return prevErr"},
	{"x/mongo/driver/operation.go", 691, "err.(RetryablePoolError); ok && rerr.Retryable() && currentBudget.allows(attempt)"},
	{"x/mongo/driver/operation.go", 700, "if prevErr != nil {"},
	{"x/mongo/driver/operation.go", 701, "return prevErr"},
	{"x/mongo/driver/operation.go", 747, "op.calculateMaxTimeMS(ctx"},
	{"x/mongo/driver/operation.go", 749, "return err"},
	{"x/mongo/driver/operation.go", 789, "op.publishStartedEvent(ctx, startedInfo)"},
	{"x/mongo/driver/operation.go", 818, "if ctx.Err() != nil {"},
	{"x/mongo/driver/operation.go", 822, "ErrDeadlineWouldBeExceeded"},
	{"x/mongo/driver/operation.go", 844, "op.publishFinishedEvent(ctx, finishedInfo)"},
	{"x/mongo/driver/operation.go", 876, "olRetryErr := tt.HasErrorLabel(ErrRetryableError) && isOverloadedError"},
	{"x/mongo/driver/operation.go", 898, "tt.HasErrorLabel(NoWritesPerformed) && !prevIndefiniteErrIsSet && prevIndefiniteErr != nil"},
	{"x/mongo/driver/operation.go", 955, "if tt.Code == 391 {"},
	{"x/mongo/driver/operation.go", 1010, "olRetryErr := tt.HasErrorLabel(ErrRetryableError) && isOverloadedError"},
	{"x/mongo/driver/operation.go", 1032, "tt.HasErrorLabel(NoWritesPerformed) && !prevIndefiniteErrIsSet && prevIndefiniteErr != nil"},
	{"mongo/bulk_write.go", 226, "if bw.collection.client.retryWrites && batch.canRetry {"},
	{"mongo/bulk_write.go", 577, "batches[insertCommand].canRetry = true"},
	{"mongo/bulk_write.go", 579, "batches[updateOneCommand].canRetry = true"},
}

func TestDriverLinesPinned(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.mongodb.org/mongo-driver/v2").Output()
	if err != nil {
		t.Fatalf("go list the driver module: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if !strings.HasSuffix(dir, "@v2.10.0") {
		t.Fatalf("driver module at %s: the citations are of v2.10.0; read them again for this version", dir)
	}
	files := map[string][]string{}
	for _, c := range driverLines {
		lines, ok := files[c.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(dir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			lines = strings.Split(string(b), "\n")
			files[c.file] = lines
		}
		if c.line > len(lines) || !strings.Contains(lines[c.line-1], c.want) {
			t.Errorf("%s:%d does not hold %q", c.file, c.line, c.want)
		}
	}
	// Every Hidden row that reads "maybe applied" cites operation.go.
	for _, r := range policy.ReplyShapes() {
		if r.Hidden == policy.MaybeApplied && r.Hidden != r.Failed && !strings.Contains(r.HiddenSource, "operation.go") {
			t.Errorf("%s: HiddenSource %q cites no driver line", r.Name, r.HiddenSource)
		}
	}
}
