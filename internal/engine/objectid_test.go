package engine

import (
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The ObjectIDs of many blocks taken at once by many goroutines are all
// distinct, carry the process's random value, the timestamp of their
// block's clock read, and consecutive counter values within a block.
func TestOIDBlocksUnique(t *testing.T) {
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	const writers, blocks, per = 8, 50, 300
	ids := make([][]bson.ObjectID, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range blocks {
				var b oidBlock
				for range per {
					ids[w] = append(ids[w], b.take(per, now))
				}
			}
		}()
	}
	wg.Wait()
	seen := map[bson.ObjectID]bool{}
	for _, ws := range ids {
		for i, id := range ws {
			if seen[id] {
				t.Fatalf("ObjectID %s handed out twice", id.Hex())
			}
			seen[id] = true
			if got := id.Timestamp(); !got.Equal(now()) {
				t.Fatalf("timestamp %v, want %v", got, now())
			}
			if [5]byte(id[4:9]) != oidUnique {
				t.Fatalf("ObjectID %s lacks the process's random value", id.Hex())
			}
			if i%per > 0 {
				prev := ws[i-1]
				if counter(id) != (counter(prev)+1)&0xFFFFFF {
					t.Fatalf("counter %d after %d within one block", counter(id), counter(prev))
				}
			}
		}
	}
	if len(seen) != writers*blocks*per {
		t.Fatalf("%d ObjectIDs, want %d", len(seen), writers*blocks*per)
	}
}

// A block is at most maxOIDBlock values and at least one, and a new block
// reads the clock again.
func TestOIDBlockBounds(t *testing.T) {
	reads := 0
	now := func() time.Time { reads++; return time.Unix(int64(1_700_000_000+reads), 0) }
	var b oidBlock
	first := b.take(1_000_000, now)
	for range maxOIDBlock - 1 {
		b.take(1_000_000, now)
	}
	if reads != 1 {
		t.Fatalf("%d clock reads for one block of %d, want 1", reads, maxOIDBlock)
	}
	next := b.take(0, now)
	if reads != 2 || next.Timestamp().Equal(first.Timestamp()) {
		t.Fatalf("a new block after %d values: %d clock reads, timestamps %v and %v", maxOIDBlock, reads, first.Timestamp(), next.Timestamp())
	}
	if b.end-b.next != 0 {
		t.Fatalf("want 0 asked as a block of 1, %d values left", b.end-b.next)
	}
}

func counter(id bson.ObjectID) uint32 {
	return uint32(id[9])<<16 | uint32(id[10])<<8 | uint32(id[11])
}
