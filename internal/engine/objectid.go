package engine

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The ObjectIDs writeguard gives documents that have no _id, laid out as
// the MongoDB specifications' "ObjectID format" (WRITING-2823,
// source/objectid.md) and the driver's bson.NewObjectID lay them out: a
// 4-byte big-endian timestamp (seconds), a 5-byte random value drawn once
// per process, a 3-byte big-endian counter that starts at a random value. writeguard keeps its own random
// value and counter (a second generator in the process, as unique as a
// second process would be) so that a call takes a block of counter
// values with one atomic add instead of one per document: concurrent
// writers then share that cache line once per call, not once per
// document.

var (
	oidUnique  [5]byte
	oidCounter atomic.Uint32
)

func init() {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("writeguard engine: cannot read random bytes for ObjectIDs: " + err.Error())
	}
	copy(oidUnique[:], b[:5])
	oidCounter.Store(uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]))
}

// oidBlock hands out ObjectIDs from a block of counter values reserved at
// once, all with one timestamp; the zero value is empty.
type oidBlock struct {
	ts        uint32 // the timestamp, seconds
	next, end uint32 // counter values left: [next, end)
}

// maxOIDBlock bounds a block (1,024 counter values): with the 24-bit
// counter, a process may hand out 16,777,216 ObjectIDs a second before
// two share a timestamp and counter, as with the driver's generator.
const maxOIDBlock = 1024

// take returns a new ObjectID, reserving a block of at most want (≥ 1,
// bounded by maxOIDBlock) counter values, stamped with the clock now,
// when the block is used up.
func (b *oidBlock) take(want int, now func() time.Time) bson.ObjectID {
	if b.next == b.end {
		n := uint32(min(max(want, 1), maxOIDBlock))
		b.end = oidCounter.Add(n)
		b.next = b.end - n
		b.ts = uint32(now().Unix())
	}
	var id bson.ObjectID
	binary.BigEndian.PutUint32(id[0:4], b.ts)
	copy(id[4:9], oidUnique[:])
	c := b.next
	id[9], id[10], id[11] = byte(c>>16), byte(c>>8), byte(c)
	b.next++
	return id
}
