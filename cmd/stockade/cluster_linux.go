package main

import (
	"context"
	"net"
	"os"
	"time"

	"github.com/stockade/stockade/cluster"
	"github.com/stockade/stockade/jail"
	"github.com/stockade/stockade/server"
)

// serveCluster is `stockade serve --cluster FILE`: the server answers its
// socket as always, and the node takes the cluster's work into it. On
// SIGTERM the node drains first (no new runs; the running ones get
// grace; the sessions get drainSessions to end by themselves), then the
// server stops (the sessions still alive end with verdict shutdown).
func serveCluster(ctx context.Context, file string, srv *server.Server, ln net.Listener, grace, drainSessions time.Duration, fail func(error) error) error {
	ccfg, err := cluster.Load(file, true)
	if err != nil {
		return fail(err)
	}
	// What an earlier process of this host left (killed, say) goes before
	// this one takes work.
	if err := jail.Sweep(os.Stderr); err != nil {
		srv.Logf("cluster: sweeping what an earlier stockade left: %v", err)
	}
	node, err := cluster.StartNode(ctx, ccfg, srv)
	if err != nil {
		return fail(err)
	}
	defer node.Close()
	srvCtx, stopSrv := context.WithCancel(context.Background())
	defer stopSrv()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, ln) }()
	srv.Logf("cluster: node %s joined; taking work", ccfg.Node)
	drained := make(chan struct{})
	go func() { node.Run(ctx, grace, drainSessions); close(drained) }()
	select {
	case <-drained:
		stopSrv()
		err = <-served
	case err = <-served:
	}
	if err != nil {
		return fail(err)
	}
	return nil
}
