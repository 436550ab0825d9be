package mocks

import "go.mongodb.org/mongo-driver/v2/bson"

// The deployments a Fake's handshake reply (Hello) can state.
const (
	// Standalone: no setName, no msg (the Fake's default).
	Standalone = "standalone"
	// ReplicaSet: setName "rs0", as a replica set primary answers. The
	// driver retries writes there (retryable writes).
	ReplicaSet = "replica_set"
	// Mongos: msg "isdbgrid", as a mongos router answers.
	Mongos = "mongos"
)

// Topology sets the deployment f's Hello reply states (Standalone,
// ReplicaSet or Mongos; anything else is Standalone): writeguard reads it
// to know whether the driver may retry a write behind one call and
// whether the server is mongos. The Fake itself never retries: a test
// scripts the error the driver returns after its hidden attempts. It
// returns f.
func (f *Fake) Topology(kind string) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch kind {
	case ReplicaSet:
		f.topology = bson.D{{Key: "setName", Value: "rs0"}, {Key: "logicalSessionTimeoutMinutes", Value: int32(30)}}
	case Mongos:
		f.topology = bson.D{{Key: "msg", Value: "isdbgrid"}, {Key: "logicalSessionTimeoutMinutes", Value: int32(30)}}
	default:
		f.topology = nil
	}
	return f
}

// AppliedThen applies the write, then fails the call with err: what the
// driver returns when an earlier attempt of its call was sent and applied
// and a later, hidden retry ended with err (the deadline checked before
// the retry's send, a cleared pool at the retry's checkout, an overload
// reply labelled NoWritesPerformed whose backoff the deadline cut short:
// mongo-go-driver v2.10.0 x/mongo/driver/operation.go 747-750, 818-822,
// 691-703, 637-646). The Fake records one call.
func AppliedThen(err error) Fault { return Fault{name: "applied_then", apply: true, after: err} }

// Fail fails the call with err without applying anything (a first
// attempt that never reached the server: the deadline checked before its
// send, say).
func Fail(err error) Fault { return Fault{name: "fail", err: err} }
