package writeguard_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/drivertest"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/xoptions"
)

// transactionContext returns a context carrying a session with a started
// transaction, on a mock deployment (no server needed).
func transactionContext(t *testing.T) (context.Context, func()) {
	t.Helper()
	opts := options.Client()
	if err := xoptions.SetInternalClientOptions(opts, "deployment", drivertest.NewMockDeployment()); err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := client.StartSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.StartTransaction(); err != nil {
		t.Fatal(err)
	}
	return mongo.NewSessionContext(context.Background(), sess), func() {
		sess.EndSession(context.Background())
		_ = client.Disconnect(context.Background())
	}
}
