// Command etcd runs the upstream etcd server; this wrapper exists because etcd's own
// main package lives in a module whose replace lines stop `go install` from building it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
