package engine

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// What the engine learns about its target, asked through the optional
// methods the root documents (UniqueIDTarget, HelloTarget). Its
// read-backs read the primary (readback.PrimaryReads, which the root
// hands it as Config.Reader).

// AskBound bounds each question the engine asks of its target (UniqueID,
// LimitsOf). The question is asked on a context of its own (askContext):
// detached from the caller's cancellation and deadline, so that a call
// whose context ended right after its last write command still learns
// the truth about its target rather than concluding from an expired
// context, and bounded by AskBound, so that a call returns at most that
// much after its deadline on this account. A client Timeout (CSOT) still
// applies inside it.
const AskBound = 5 * time.Second

// askContext returns the context a question to the target is asked on:
// ctx's values (trace spans, attempt tags) without its cancellation or
// deadline, bounded by AskBound.
func askContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), AskBound)
}

// UniqueID returns what the engine asks (Config.UniqueID) of target t:
// the declared value, or what t says (a *mongo.Collection: listCollections
// type "timeseries"; a t with UniqueID(ctx) (bool, error): its answer),
// learned once, each ask on its own bounded context (askContext: an
// expired call context is never the reason of an answer). An error is not
// cached: it is returned, and the next call asks again (the engine retries
// it as a read-back, then counts _id as not unique for that call).
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
			actx, cancel := askContext(ctx)
			v, err := ask(actx)
			cancel()
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
// reply; a t with Hello(ctx) (bson.Raw, error): its answer), learned once,
// asked on its own bounded context (askContext); an error is not cached and
// gives the defaults for that call.
func LimitsOf(t any) func(context.Context) Limits {
	ask := helloOf(t)
	if ask == nil {
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
			actx, cancel := askContext(ctx)
			reply, err := ask(actx)
			cancel()
			if err != nil {
				return DefaultLimits
			}
			l := ParseHello(reply)
			known = &l
		}
		return *known
	}
}

// helloOf returns how to ask target t for its hello reply (a
// *mongo.Collection: the hello command on its database; a t with
// Hello(ctx) (bson.Raw, error): that method), nil when t cannot be asked.
func helloOf(t any) func(context.Context) (bson.Raw, error) {
	switch c := t.(type) {
	case *mongo.Collection:
		return func(ctx context.Context) (bson.Raw, error) {
			return c.Database().RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
		}
	case interface {
		Hello(ctx context.Context) (bson.Raw, error)
	}:
		return c.Hello
	}
	return nil
}
