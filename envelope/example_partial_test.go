package envelope_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
)

// PutEach says, per envelope, what a sink stored: here a FileSink, where
// an envelope whose original is not valid BSON fails alone and the others
// are written. A dead-letter path reports the stored ones as dead-lettered
// and retries or fails only the rest.
func ExamplePutEach() {
	dir, err := os.MkdirTemp("", "dlq")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	sink, err := dlq.NewFileSink(filepath.Join(dir, "dlq.jsonl"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sink.Close()

	good, _ := bson.Marshal(bson.D{{Key: "_id", Value: 1}, {Key: "qty", Value: 0}})
	envs := []envelope.Envelope{
		{Original: good, Code: 121, Namespace: "shop.orders"},
		{Original: bson.Raw{1, 2, 3}, Code: 121, Namespace: "shop.orders"}, // not BSON
	}
	for i, err := range envelope.PutEach(context.Background(), sink, envs) {
		fmt.Printf("envelope %d stored: %v\n", i, err == nil)
	}
	back, err := dlq.ReadFile(sink.Path())
	var le *envelope.LineError
	fmt.Println(len(back), "envelope read back; broken lines:", errors.As(err, &le))
	// Output:
	// envelope 0 stored: true
	// envelope 1 stored: false
	// 1 envelope read back; broken lines: false
}
