// Command phobos runs and talks to phobos clusters: heads, raylets, a
// whole local cluster, the demo, job control, benchmarks and the
// fault-injection harness. Its commands live in package cli.
package main

import "github.com/phobos-project/phobos/cli"

func main() { cli.Main() }
