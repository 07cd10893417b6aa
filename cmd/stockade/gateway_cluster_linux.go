package main

import (
	"context"

	"github.com/stockade/stockade/cluster"
	"github.com/stockade/stockade/gateway"
)

// clusterBackend is the cluster a gateway forwards to: the cluster file's
// NATS, as the gateway's role.
func clusterBackend(ctx context.Context, file string) (gateway.Backend, func(), error) {
	cfg, err := cluster.Load(file, false)
	if err != nil {
		return nil, nil, err
	}
	b, err := cluster.NewBackend(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return b, b.Close, nil
}
