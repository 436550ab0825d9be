package mocks

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/internal/driveropts"
)

// The update, replace, delete and findAndModify methods of Fake. Each is
// one write call: it consumes one Fault of the script, like InsertOne. The
// update, replace and delete commands report a failed statement as a write
// error (mongo.WriteException); findAndModify reports it as the command's
// error (mongo.CommandError), as the server does
// (src/mongo/db/commands/find_and_modify.cpp: the plan executor's failure
// is uassert'ed as the command's status).

// UpdateOne implements writeguard.Collection: $set, $unset, $inc and
// $setOnInsert on top-level fields; only the upsert option is read.
func (f *Fake) UpdateOne(ctx context.Context, filter any, update any, opts ...options.Lister[options.UpdateOneOptions]) (*mongo.UpdateResult, error) {
	var o options.UpdateOneOptions
	listAll(opts, &o)
	return f.update(ctx, OpUpdateOne, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update).SetUpsert(o.Upsert != nil && *o.Upsert))
}

// UpdateByID implements writeguard.Collection: UpdateOne with the filter
// {_id: id}.
func (f *Fake) UpdateByID(ctx context.Context, id any, update any, opts ...options.Lister[options.UpdateOneOptions]) (*mongo.UpdateResult, error) {
	return f.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update, opts...)
}

// UpdateMany implements writeguard.Collection; only the upsert option is
// read.
func (f *Fake) UpdateMany(ctx context.Context, filter any, update any, opts ...options.Lister[options.UpdateManyOptions]) (*mongo.UpdateResult, error) {
	var o options.UpdateManyOptions
	listAll(opts, &o)
	return f.update(ctx, OpUpdateMany, mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(update).SetUpsert(o.Upsert != nil && *o.Upsert))
}

// ReplaceOne implements writeguard.Collection; only the upsert option is
// read.
func (f *Fake) ReplaceOne(ctx context.Context, filter any, replacement any, opts ...options.Lister[options.ReplaceOptions]) (*mongo.UpdateResult, error) {
	var o options.ReplaceOptions
	listAll(opts, &o)
	return f.update(ctx, OpReplaceOne, mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(replacement).SetUpsert(o.Upsert != nil && *o.Upsert))
}

func (f *Fake) update(ctx context.Context, opName string, m mongo.WriteModel) (*mongo.UpdateResult, error) {
	o, err := toOp(m)
	if err != nil {
		return nil, err
	}
	c, err := f.exec(ctx, opName, []op{o}, true)
	if errors.Is(err, errUnacknowledged) {
		return &mongo.UpdateResult{}, nil
	}
	if c == nil {
		return nil, err
	}
	res := &mongo.UpdateResult{MatchedCount: c.matched, ModifiedCount: c.modified, UpsertedCount: c.upserted, Acknowledged: true}
	if id, ok := c.upsertedIDs[0]; ok {
		res.UpsertedID = id
	}
	return res, err
}

// DeleteOne implements writeguard.Collection.
func (f *Fake) DeleteOne(ctx context.Context, filter any, _ ...options.Lister[options.DeleteOneOptions]) (*mongo.DeleteResult, error) {
	return f.delete(ctx, OpDeleteOne, mongo.NewDeleteOneModel().SetFilter(filter))
}

// DeleteMany implements writeguard.Collection.
func (f *Fake) DeleteMany(ctx context.Context, filter any, _ ...options.Lister[options.DeleteManyOptions]) (*mongo.DeleteResult, error) {
	return f.delete(ctx, OpDeleteMany, mongo.NewDeleteManyModel().SetFilter(filter))
}

func (f *Fake) delete(ctx context.Context, opName string, m mongo.WriteModel) (*mongo.DeleteResult, error) {
	o, err := toOp(m)
	if err != nil {
		return nil, err
	}
	c, err := f.exec(ctx, opName, []op{o}, true)
	if errors.Is(err, errUnacknowledged) {
		return &mongo.DeleteResult{}, nil
	}
	if c == nil {
		return nil, err
	}
	return &mongo.DeleteResult{DeletedCount: c.deleted, Acknowledged: true}, err
}

// FindOneAndUpdate implements writeguard.Collection: the document before
// the update (or after it, with ReturnDocument After); the upsert option
// is read. A failed statement is the command's error (CommandError).
func (f *Fake) FindOneAndUpdate(ctx context.Context, filter any, update any, opts ...options.Lister[options.FindOneAndUpdateOptions]) *mongo.SingleResult {
	var o options.FindOneAndUpdateOptions
	listAll(opts, &o)
	after := o.ReturnDocument != nil && *o.ReturnDocument == options.After
	return f.findAndModify(ctx, OpFindOneAndUpdate, mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update).SetUpsert(o.Upsert != nil && *o.Upsert), after)
}

// FindOneAndReplace implements writeguard.Collection, as FindOneAndUpdate.
func (f *Fake) FindOneAndReplace(ctx context.Context, filter any, replacement any, opts ...options.Lister[options.FindOneAndReplaceOptions]) *mongo.SingleResult {
	var o options.FindOneAndReplaceOptions
	listAll(opts, &o)
	after := o.ReturnDocument != nil && *o.ReturnDocument == options.After
	return f.findAndModify(ctx, OpFindOneAndReplace, mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(replacement).SetUpsert(o.Upsert != nil && *o.Upsert), after)
}

// FindOneAndDelete implements writeguard.Collection: the deleted document.
func (f *Fake) FindOneAndDelete(ctx context.Context, filter any, _ ...options.Lister[options.FindOneAndDeleteOptions]) *mongo.SingleResult {
	return f.findAndModify(ctx, OpFindOneAndDelete, mongo.NewDeleteOneModel().SetFilter(filter), false)
}

func (f *Fake) findAndModify(ctx context.Context, opName string, m mongo.WriteModel, after bool) *mongo.SingleResult {
	fail := func(err error) *mongo.SingleResult { return mongo.NewSingleResultFromDocument(bson.D{}, err, nil) }
	o, err := toOp(m)
	if err != nil {
		return fail(err)
	}
	f.mu.Lock()
	var before bson.Raw
	for _, d := range f.docs {
		if matches(d, o.filter) {
			before = d
			break
		}
	}
	f.mu.Unlock()
	c, err := f.exec(ctx, opName, []op{o}, true)
	if errors.Is(err, errUnacknowledged) {
		err = nil
	}
	var we mongo.WriteException
	if errors.As(err, &we) && len(we.WriteErrors) > 0 {
		// findAndModify has no writeErrors: the statement's failure is the
		// command's.
		w := we.WriteErrors[0]
		reply := bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: int32(w.Code)}, {Key: "errmsg", Value: w.Message}}
		if w.Details != nil {
			reply = append(reply, bson.E{Key: "errInfo", Value: w.Details})
		}
		raw, merr := bson.Marshal(reply)
		if merr != nil {
			return fail(merr)
		}
		_, err = ReplyResult(opName, raw)
	}
	if c == nil || err != nil {
		return fail(err)
	}
	doc := before
	if after || before == nil {
		doc = nil
		f.mu.Lock()
		switch {
		case before != nil && o.kind != "delete":
			id := before.Lookup("_id")
			for _, d := range f.docs {
				if d.Lookup("_id").Equal(id) {
					doc = d
				}
			}
		case before == nil && after && c.upserted > 0:
			doc = f.docs[len(f.docs)-1]
		}
		f.mu.Unlock()
	}
	if doc == nil {
		return fail(mongo.ErrNoDocuments)
	}
	return mongo.NewSingleResultFromDocument(doc, nil, nil)
}

// listAll applies opts to o as the driver does (driveropts.Apply); a
// failing setter is a bug of the test: it panics.
func listAll[T any](opts []options.Lister[T], o *T) {
	if err := driveropts.Apply(opts, o); err != nil {
		panic(fmt.Sprintf("mocks: option: %v", err))
	}
}

type poisonDoc struct {
	id    bson.RawValue
	fault Fault
}

// Poison makes every later write call that carries an insert of the
// document with _id id fail as ft (a Reply, such as a whole-command
// {"ok":0,"code":10334,...}, or DropConnection), applying nothing: a
// poison document, which sinks every command it is in. Such a call does
// not consume the script. It panics when ft is neither a Reply nor
// DropConnection, or id cannot be marshalled: a test bug.
func (f *Fake) Poison(id any, ft Fault) *Fake {
	if ft.reply == nil && !ft.network || ft.apply {
		panic("mocks.Poison: the fault must be a Reply or DropConnection")
	}
	raw, err := bson.Marshal(bson.D{{Key: "v", Value: id}})
	if err != nil {
		panic(fmt.Sprintf("mocks.Poison: %v", err))
	}
	ft.name = "poison_" + ft.name
	f.mu.Lock()
	f.poison = append(f.poison, poisonDoc{id: bson.Raw(raw).Lookup("v"), fault: ft})
	f.mu.Unlock()
	return f
}

// poisonFault returns the fault of a poison document among ops.
func (f *Fake) poisonFault(ops []op) (Fault, bool) {
	for _, p := range f.poison {
		for _, o := range ops {
			if o.kind != "insert" {
				continue
			}
			if id, err := o.doc.LookupErr("_id"); err == nil && id.Equal(p.id) {
				return p.fault, true
			}
		}
	}
	return Fault{}, false
}
