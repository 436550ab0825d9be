package mocks

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TimeSeries makes f a time-series collection: it has no unique index on
// _id (MongoDB manual, time-series limitations), so a second insert of a
// document with the same _id is stored, not refused, and UniqueID reports
// false. It returns f.
func (f *Fake) TimeSeries() *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeSeries = true
	return f
}

// UniqueID reports whether _id is unique in f: false for a TimeSeries
// Fake (writeguard.UniqueIDTarget).
func (f *Fake) UniqueID(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.timeSeries, nil
}

// Limits sets the write limits f states in its handshake reply (Hello):
// maxWriteBatchSize statements and maxMessageSizeBytes bytes per command
// (0 leaves a limit at the server's default), so that a test can make
// writeguard split a call into several commands. It returns f.
func (f *Fake) Limits(maxWriteBatchSize, maxMessageSizeBytes int) *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hello = bson.D{{Key: "maxBsonObjectSize", Value: int32(16 * 1024 * 1024)}}
	if maxWriteBatchSize > 0 {
		f.hello = append(f.hello, bson.E{Key: "maxWriteBatchSize", Value: int32(maxWriteBatchSize)})
	}
	if maxMessageSizeBytes > 0 {
		f.hello = append(f.hello, bson.E{Key: "maxMessageSizeBytes", Value: int32(maxMessageSizeBytes)})
	}
	return f
}

// Hello returns f's handshake reply: {ok: 1, isWritablePrimary: true} and
// the limits set with Limits (writeguard.HelloTarget).
func (f *Fake) Hello(context.Context) (bson.Raw, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := append(bson.D{{Key: "ok", Value: 1}, {Key: "isWritablePrimary", Value: true}}, f.hello...)
	return bson.Marshal(append(reply, f.topology...))
}
