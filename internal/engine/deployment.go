package engine

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Deployment is the kind of server a guarded collection writes to, as its
// hello reply states it: what the driver may do behind an attempt (retry
// a write, on a replica set or mongos only) and what a reply proves
// (mongos loses a shard's reply as a whole-command network code).
type Deployment uint8

const (
	// DeploymentUnknown: the hello reply could not be read (nil
	// Config.Deployment, a failed hello): every rule that depends on the
	// deployment takes its most careful reading (the driver may retry,
	// the server may be mongos).
	DeploymentUnknown Deployment = iota
	// DeploymentStandalone: a mongod outside a replica set (no setName, no
	// msg "isdbgrid"). The driver never retries a write there
	// (x/mongo/driver/operation.go retryable: retryWritesSupported is
	// false for description.ServerKindStandalone).
	DeploymentStandalone
	// DeploymentReplicaSet: a replica set member (setName).
	DeploymentReplicaSet
	// DeploymentMongos: a mongos router (msg "isdbgrid", the handshake's
	// sign the driver itself reads for description.ServerKindMongos).
	DeploymentMongos
)

// String returns unknown, standalone, replica_set or mongos.
func (d Deployment) String() string {
	switch d {
	case DeploymentStandalone:
		return "standalone"
	case DeploymentReplicaSet:
		return "replica_set"
	case DeploymentMongos:
		return "mongos"
	}
	return "unknown"
}

// ParseDeployment reads the deployment from a hello reply: msg "isdbgrid"
// is mongos, a setName (or isreplicaset, a member not yet initiated) a
// replica set member, any other acknowledged reply a standalone
// (mongo-go-driver v2.10.0 x/mongo/description/server.go NewServer reads
// the same fields). A reply without ok: 1 is DeploymentUnknown.
func ParseDeployment(reply bson.Raw) Deployment {
	if ok, _ := reply.Lookup("ok").AsFloat64OK(); ok != 1 {
		if ok, _ := reply.Lookup("ok").AsInt64OK(); ok != 1 {
			return DeploymentUnknown
		}
	}
	if msg, _ := reply.Lookup("msg").StringValueOK(); msg == "isdbgrid" {
		return DeploymentMongos
	}
	if _, ok := reply.Lookup("setName").StringValueOK(); ok {
		return DeploymentReplicaSet
	}
	if rs, _ := reply.Lookup("isreplicaset").BooleanOK(); rs {
		return DeploymentReplicaSet
	}
	return DeploymentStandalone
}

// helloTimeout bounds the hello that learns the deployment: a failed call
// past its deadline waits at most this long for it, once.
const helloTimeout = 2 * time.Second

// DeploymentOf returns a Config.Deployment for target t: a
// *mongo.Collection is asked with the hello command, a Target with a
// Hello method (mocks.Fake) through it; any other Target gives nil
// (DeploymentUnknown). The answer is kept once known; a failed hello is
// asked again next time and meanwhile counts as DeploymentUnknown. The
// hello runs on a context of its own that keeps ctx's values but not its
// cancellation (the call's context may be the one that just ended: a
// deployment is never concluded from an expired context), bounded by
// helloTimeout; a hello that does not answer in time leaves the
// deployment unknown, the most careful reading (the driver may have
// retried, the server may be mongos). It is asked only when a reply's
// reading depends on it, so at most once per Guarded once known.
func DeploymentOf(t any) func(ctx context.Context) Deployment {
	ask := helloOf(t)
	if ask == nil {
		return nil
	}
	var (
		mu    sync.Mutex
		known Deployment
	)
	return func(ctx context.Context) Deployment {
		mu.Lock()
		defer mu.Unlock()
		if known != DeploymentUnknown {
			return known
		}
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), helloTimeout)
		defer cancel()
		if reply, err := ask(hctx); err == nil {
			known = ParseDeployment(reply)
		}
		return known
	}
}

// deployment returns the collection's deployment (Config.Deployment),
// DeploymentUnknown when it cannot be learned.
func (c *Call) deployment(ctx context.Context) Deployment {
	if c.e.cfg.Deployment == nil {
		return DeploymentUnknown
	}
	return c.e.cfg.Deployment(ctx)
}
