package engine

import (
	"context"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// What the engine learns about its target, asked through the optional
// methods the root documents (UniqueIDTarget, HelloTarget). Its
// read-backs read the primary (readback.PrimaryReads, which the root
// hands it as Config.Reader).

// UniqueID returns what the engine asks (Config.UniqueID) of target t:
// the declared value, or what t says (a *mongo.Collection: listCollections
// type "timeseries"; a t with UniqueID(ctx) (bool, error): its answer),
// learned once. An error is not cached: it is returned, and the next call
// asks again (the engine retries it as a read-back, then counts _id as not
// unique for that call).
func UniqueID(t any, declared *bool) func(context.Context) (bool, error) {
	if declared != nil {
		v := *declared
		return func(context.Context) (bool, error) { return v, nil }
	}
	var ask func(context.Context) (bool, error)
	switch c := t.(type) {
	case *mongo.Collection:
		ask = func(ctx context.Context) (bool, error) {
			specs, err := c.Database().ListCollectionSpecifications(ctx, bson.D{{Key: "name", Value: c.Name()}})
			if err != nil {
				return false, err
			}
			return len(specs) == 0 || specs[0].Type != "timeseries", nil
		}
	case interface {
		UniqueID(ctx context.Context) (bool, error)
	}:
		ask = c.UniqueID
	default:
		return nil // unique
	}
	var (
		mu     sync.Mutex
		known  bool
		unique bool
	)
	return func(ctx context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if !known {
			v, err := ask(ctx)
			if err != nil {
				return false, err
			}
			known, unique = true, v
		}
		return unique, nil
	}
}

// LimitsOf returns what the engine asks (Config.Limits) of target t: the
// server's limits on one write command (a *mongo.Collection: its hello
// reply; a t with Hello(ctx) (bson.Raw, error): its answer), learned once (an error is not cached and
// gives the defaults for that call).
func LimitsOf(t any) func(context.Context) Limits {
	var ask func(context.Context) (bson.Raw, error)
	switch c := t.(type) {
	case *mongo.Collection:
		ask = func(ctx context.Context) (bson.Raw, error) {
			return c.Database().RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
		}
	case interface {
		Hello(ctx context.Context) (bson.Raw, error)
	}:
		ask = c.Hello
	default:
		return nil
	}
	var (
		mu    sync.Mutex
		known *Limits
	)
	return func(ctx context.Context) Limits {
		mu.Lock()
		defer mu.Unlock()
		if known == nil {
			reply, err := ask(ctx)
			if err != nil {
				return DefaultLimits
			}
			l := ParseHello(reply)
			known = &l
		}
		return *known
	}
}
