package writeguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// usersWithEmails is a collection with a unique index on email (email_1)
// holding u-1 (a@example.com) and u-2 (b@example.com).
func usersWithEmails(t *testing.T) *mocks.Fake {
	t.Helper()
	fake := mocks.NewFake("db.users").Unique("email")
	if err := fake.Seed(
		bson.D{{Key: "_id", Value: "u-1"}, {Key: "email", Value: "a@example.com"}},
		bson.D{{Key: "_id", Value: "u-2"}, {Key: "email", Value: "b@example.com"}},
	); err != nil {
		t.Fatal(err)
	}
	return fake
}

var takeEmail = bson.D{{Key: "$set", Value: bson.D{{Key: "email", Value: "a@example.com"}}}}

// C71: an UpdateOne that sets email to a value another document holds
// meets 11000 on email_1. ConflictSkip skips inserts only: the refused
// change is a conflict the caller sees, not conflict_skipped;
// ConflictSkipAll, chosen by the caller, skips it.
func TestC71SkipHandlerKeepsUpdateConflicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler writeguard.ConflictHandler
		want    writeguard.Disposition
		handled bool
	}{
		{"ConflictSkip", writeguard.ConflictSkip(), writeguard.Conflicted, false},
		{"ConflictSkipAll", writeguard.ConflictSkipAll(), writeguard.ConflictSkipped, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := usersWithEmails(t)
			var seen []*writeguard.Conflict
			spy := writeguard.ConflictHandlerFunc(func(ctx context.Context, c *writeguard.Conflict) (policy.Disposition, error) {
				seen = append(seen, c)
				return tc.handler.Resolve(ctx, c)
			})
			fx := newFixture(t, fake, writeguard.WithConflictHandler(spy))
			_, err := fx.g.UpdateOne(ctx, bson.D{{Key: "_id", Value: "u-2"}}, takeEmail)
			var r *writeguard.Report
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a Report", err)
			}
			if got := r.Outcomes[0].Disposition; got != tc.want || r.Handled() != tc.handled || writeguard.Handled(err) != tc.handled {
				t.Fatalf("disposition %s, Handled %v; want %s, Handled %v", got, r.Handled(), tc.want, tc.handled)
			}
			if len(seen) != 1 || !seen[0].IsUpdate() || seen[0].IndexName != "email_1" || seen[0].Operation != "updateOne" {
				t.Fatalf("handler saw %d conflicts (%+v); want one update conflict on email_1", len(seen), seen)
			}
			if !mongo.IsDuplicateKeyError(err) || !errors.Is(err, writeguard.ErrConflict) {
				t.Errorf("IsDuplicateKeyError %v, errors.Is(ErrConflict) %v; want both", mongo.IsDuplicateKeyError(err), errors.Is(err, writeguard.ErrConflict))
			}
			if got := fake.Docs()[1].Lookup("email").StringValue(); got != "b@example.com" {
				t.Errorf("u-2's email is %q; the refused update changed it", got)
			}
		})
	}
}

// Every update and replace surface (methods and BulkWrite models, upserts
// included) reaches the handler as an update; an insert does not, and
// ConflictSkip still skips it. A multi statement (UpdateMany, an
// UpdateManyModel) never reaches the handler: its write error proves
// nothing about the documents it changed before the refusal
// (write_ops_exec.cpp handleError), so it ends unknown with MaybeWritten.
func TestConflictIsUpdateOnEverySurface(t *testing.T) {
	by2 := bson.D{{Key: "_id", Value: "u-2"}}
	byNew := bson.D{{Key: "_id", Value: "u-9"}}
	taken := bson.D{{Key: "_id", Value: "u-2"}, {Key: "email", Value: "a@example.com"}}
	calls := []struct {
		name   string
		update bool
		run    func(g *writeguard.Guarded) error
	}{
		{"insertOne", false, func(g *writeguard.Guarded) error {
			_, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: "u-3"}, {Key: "email", Value: "a@example.com"}})
			return err
		}},
		{"insertModel", false, func(g *writeguard.Guarded) error {
			_, err := g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "u-3"}, {Key: "email", Value: "a@example.com"}})})
			return err
		}},
		{"updateOne", true, func(g *writeguard.Guarded) error { _, err := g.UpdateOne(ctx, by2, takeEmail); return err }},
		{"updateByID", true, func(g *writeguard.Guarded) error { _, err := g.UpdateByID(ctx, "u-2", takeEmail); return err }},
		{"updateMany", true, func(g *writeguard.Guarded) error { _, err := g.UpdateMany(ctx, by2, takeEmail); return err }},
		{"replaceOne", true, func(g *writeguard.Guarded) error { _, err := g.ReplaceOne(ctx, by2, taken); return err }},
		{"upsert", true, func(g *writeguard.Guarded) error {
			_, err := g.UpdateOne(ctx, byNew, takeEmail, options.UpdateOne().SetUpsert(true))
			return err
		}},
		{"findOneAndUpdate", true, func(g *writeguard.Guarded) error { return g.FindOneAndUpdate(ctx, by2, takeEmail).Err() }},
		{"findOneAndReplace", true, func(g *writeguard.Guarded) error { return g.FindOneAndReplace(ctx, by2, taken).Err() }},
		{"updateOneModel", true, func(g *writeguard.Guarded) error {
			_, err := g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewUpdateOneModel().SetFilter(by2).SetUpdate(takeEmail)})
			return err
		}},
		{"updateManyModel", true, func(g *writeguard.Guarded) error {
			_, err := g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewUpdateManyModel().SetFilter(by2).SetUpdate(takeEmail)})
			return err
		}},
		{"replaceOneModel", true, func(g *writeguard.Guarded) error {
			_, err := g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewReplaceOneModel().SetFilter(by2).SetReplacement(taken)})
			return err
		}},
		{"upsertModel", true, func(g *writeguard.Guarded) error {
			_, err := g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewUpdateOneModel().SetFilter(byNew).SetUpdate(takeEmail).SetUpsert(true)})
			return err
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			var isUpdate []bool
			spy := writeguard.ConflictHandlerFunc(func(ctx context.Context, c *writeguard.Conflict) (policy.Disposition, error) {
				isUpdate = append(isUpdate, c.IsUpdate())
				return writeguard.ConflictSkip().Resolve(ctx, c)
			})
			fx := newFixture(t, usersWithEmails(t), writeguard.WithConflictHandler(spy))
			err := tc.run(fx.g)
			var r *writeguard.Report
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a Report", err)
			}
			if strings.HasPrefix(tc.name, "updateMany") {
				o := r.Outcomes[0]
				if len(isUpdate) != 0 || o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
					t.Fatalf("multi statement: handler saw %v, outcome %s MaybeWritten %v; want no conflict, unknown with MaybeWritten", isUpdate, o.Disposition, o.MaybeWritten)
				}
				return
			}
			if len(isUpdate) != 1 || isUpdate[0] != tc.update {
				t.Fatalf("IsUpdate per conflict %v, want [%v]", isUpdate, tc.update)
			}
			want := writeguard.ConflictSkipped
			if tc.update {
				want = writeguard.Conflicted
			}
			if got := r.Outcomes[0].Disposition; got != want {
				t.Errorf("ConflictSkip: %s, want %s", got, want)
			}
		})
	}
}
