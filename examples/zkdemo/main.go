// Command zkdemo talks to a coordrun ensemble with an ordinary ZooKeeper
// client (go-zookeeper/zk): it writes, watches, and reads back, the way any
// existing ZooKeeper application would.
//
//	go run ./examples/zkdemo -servers 127.0.0.1:2181 write
//	go run ./examples/zkdemo -servers 127.0.0.1:2181 check
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

type quiet struct{}

func (quiet) Printf(string, ...interface{}) {}

func main() {
	servers := flag.String("servers", "127.0.0.1:2181", "comma-separated client addresses")
	flag.Parse()
	conn, _, err := zk.Connect(strings.Split(*servers, ","), 4*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	switch flag.Arg(0) {
	case "write":
		write(conn)
	case "check":
		check(conn)
	default:
		fmt.Fprintln(os.Stderr, "usage: zkdemo [-servers list] write|check")
		os.Exit(64)
	}
}

func write(conn *zk.Conn) {
	if _, err := conn.Create("/demo", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
		log.Fatal(err)
	}
	_, _, watch, err := conn.ChildrenW("/demo")
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		p, err := conn.Create("/demo/job-", []byte(fmt.Sprintf("run %d", i)), zk.FlagSequence, zk.WorldACL(zk.PermAll))
		if err != nil {
			log.Fatal(err)
		}
		_, st, _ := conn.Exists(p)
		fmt.Printf("created %s (czxid %d)\n", p, st.Czxid)
	}
	select {
	case ev := <-watch:
		fmt.Printf("watch fired: %s on %s\n", ev.Type, ev.Path)
	case <-time.After(5 * time.Second):
		log.Fatal("no watch event")
	}
}

func check(conn *zk.Conn) {
	kids, st, err := conn.Children("/demo")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("/demo has %d children (cversion %d): %s\n", st.NumChildren, st.Cversion, strings.Join(kids, " "))
}
