package main

import (
	"context"
	"errors"

	"github.com/stockade/stockade/gateway"
)

// clusterBackend is the cluster a gateway forwards to.
func clusterBackend(ctx context.Context, file string) (gateway.Backend, func(), error) {
	return nil, nil, errors.New("gateway: this build has no cluster backend")
}
