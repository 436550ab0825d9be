package writeguard_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
)

// readmeUsage holds the README's usage snippet ("Use it in your code")
// verbatim between the markers, so that the snippet compiles with every
// build of the tests; TestReadmeUsageSnippet keeps the two identical.
func readmeUsage(ctx context.Context, uri string, docs []any) error {
	// README BEGIN
	client, _ := mongo.Connect(options.Client().ApplyURI(uri))
	db := client.Database("shop")
	// The dead-letter collection: permissive validator, TTL, unique fingerprint.
	if _, err := dlq.EnsureCollection(ctx, db, "orders_dlq"); err != nil {
		return err
	}
	orders, err := writeguard.Wrap(db.Collection("orders"),
		writeguard.WithDeadLetter(dlq.NewMongoSink(db.Collection("orders_dlq"))), // where 121 documents go
		writeguard.WithConflictHandler(writeguard.ConflictSkip()),
	)
	if err != nil {
		return err // an invalid option, named
	}
	res, err := orders.InsertMany(ctx, docs)
	switch {
	case err == nil:
		// every document written; res is exactly what the driver returned
	case writeguard.Handled(err):
		// some were dead-lettered or resolved; nothing left to do
	default:
		var r *writeguard.Report
		if errors.As(err, &r) {
			for _, o := range r.Outcomes {
				// o.Index, o.ID, o.Disposition, o.Failure (code, labels, errInfo), o.Document (unless stored)
				_ = o
			}
		}
	}
	// README END
	_ = res
	return nil
}

// The README's usage snippet is readmeUsage's body: it compiles.
func TestReadmeUsageSnippet(t *testing.T) {
	_ = readmeUsage // compiled, not run: it needs a server
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(src), "\t// README BEGIN\n")
	body, _, _ = strings.Cut(body, "\t// README END\n")
	var want []string
	for _, l := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		l = strings.TrimPrefix(l, "\t")
		if strings.TrimSpace(l) == "_ = o" {
			continue // keeps the loop variable used; the README leaves it to the reader
		}
		want = append(want, l)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "## Use it in your code\n\n```go\n")
	block, _, _ = strings.Cut(block, "```\n")
	if got := strings.TrimRight(block, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("README's usage snippet differs from readmeUsage in readme_test.go:\n--- README\n%s\n--- readme_test.go\n%s", got, strings.Join(want, "\n"))
	}
}
