// million.go: the Go reference for examples/million.rs. Spawns N goroutines that each block
// on a channel, waits until all have started, releases and waits for them; ROUNDS times in
// one process (the second round reuses the stacks of the first round's dead goroutines, as
// smarm's second round reuses its kept stacks).
//
// Run: GOMAXPROCS=2 go run benches/go/million.go [N] [ROUNDS]
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	n := 1000000
	rounds := 2
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	if len(os.Args) > 2 {
		rounds, _ = strconv.Atoi(os.Args[2])
	}
	for r := 1; r <= rounds; r++ {
		gate := make(chan struct{})
		var started int64
		var wg sync.WaitGroup
		wg.Add(n)
		t0 := time.Now()
		for i := 0; i < n; i++ {
			go func() {
				atomic.AddInt64(&started, 1)
				<-gate
				wg.Done()
			}()
		}
		for atomic.LoadInt64(&started) < int64(n) {
			time.Sleep(time.Millisecond)
		}
		secs := time.Since(t0).Seconds()
		fmt.Printf("go million round %d: %d goroutines blocked after %.2f s (%.0f/s)\n", r, n, secs, float64(n)/secs)
		close(gate)
		wg.Wait()
	}
}
