// Command replicated-db is a small replicated key-value store coordinated
// by a coordrun ensemble (or Apache ZooKeeper): run three of it, and each
// registers in a group, one is elected leader, writes go through the
// leader to every live follower, and a node that (re)joins copies the data
// before it counts as live. See README.md.
//
//	replicated-db -name n1 -http 127.0.0.1:8081 -servers 127.0.0.1:2181
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "replicated-db:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("replicated-db", flag.ContinueOnError)
	name := fs.String("name", "", "this node's name, unique in the cluster (required)")
	listen := fs.String("http", "127.0.0.1:8080", "HTTP listen address")
	advertise := fs.String("advertise", "", "HTTP address the other nodes reach this one at (default: the listen address)")
	servers := fs.String("servers", "127.0.0.1:2181", "ensemble members, comma-separated")
	root := fs.String("root", "/replicated-db", "znode folder of the cluster")
	sessionTimeout := fs.Duration("session-timeout", 4*time.Second, "session timeout: how long a dead node stays live and, if it led, leader")
	drift := fs.Duration("drift-margin", 250*time.Millisecond, "a leader stops acknowledging writes this long before its session lease ends")
	verbose := fs.Bool("v", false, "debug logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || strings.ContainsRune(*name, '/') {
		return errors.New("-name is required and may not contain '/'")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", *name)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	addr := *advertise
	if addr == "" {
		addr = ln.Addr().String()
	}
	n := newNode(config{
		Name:           *name,
		Addr:           addr,
		Servers:        strings.Split(*servers, ","),
		Root:           *root,
		SessionTimeout: *sessionTimeout,
		DriftMargin:    *drift,
	}, log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: n.handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln); stop() }()
	log.Info("serving HTTP", "addr", addr)

	err = n.run(ctx)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
