package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every move to retrying goes through toRetrying, which tells
// scheduleRetry there is something to look for: a move made elsewhere
// would leave a document retrying that no pass ever sends again.
func TestRetryingOnlyThroughToRetrying(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.Contains(line, "to(retrying)") && !(f == "state.go" && strings.TrimSpace(line) == "it.to(retrying)" && strings.Contains(string(src), "func (c *Call) toRetrying(it *item) {\n\tit.to(retrying)\n")) {
				t.Errorf("%s:%d moves to retrying without toRetrying: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// An insert call's items are inserts from the start: takeDocs relies on
// KindInsert being Kind's zero value and sets nothing per item.
func TestNewCallItemsAreInserts(t *testing.T) {
	c := New(Config{}).newCall("insertMany", true, 3)
	c.takeDocs([]any{1, 2, 3}, false)
	for i, it := range c.items {
		if it.kind != KindInsert {
			t.Fatalf("item %d of an insert call has kind %d, want KindInsert", i, it.kind)
		}
	}
}
