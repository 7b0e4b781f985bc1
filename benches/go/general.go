// Go versions of the general.rs rows that issue 16 compares with Go (spawn_many,
// spawn_storm_busy, ping_pong_oneshot, spawn_pair_control, chained_spawn, fan_out_compute),
// with the same work sizes. Not part of CI; a measurement:
//
//	go run benches/go/general.go
//
// prints, for GOMAXPROCS 1 and 2 (labelled 1T and 2T as general.rs does), the median and
// range of 11 samples after one warm-up, in general.rs's units. A Go sample times the work
// only: Go has no runtime to build per sample, while a general.rs sample also builds and
// shuts down its runtime (a few tens of microseconds, see outputs/history.md 58).
package main

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

const (
	spawnN        = 100_000
	pingRounds    = 1_000
	chain         = 1_000
	fanActors     = 1_000
	xorshiftSteps = 10_000
	repeats       = 11
)

// spawnStorm: spawnN goroutines that each bump a counter (the last one signals), beside
// `busy` goroutines that yield until the storm is over.
func spawnStorm(busy int) time.Duration {
	start := time.Now()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < busy; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				runtime.Gosched()
			}
		}()
	}
	var done atomic.Int64
	fin := make(chan struct{})
	for i := 0; i < spawnN; i++ {
		go func() {
			if done.Add(1) == spawnN {
				close(fin)
			}
		}()
	}
	<-fin
	stop.Store(true)
	wg.Wait()
	return time.Since(start)
}

// pingPongOneshot: per round, b waits for a's value and answers it plus one; both joined.
func pingPongOneshot() time.Duration {
	start := time.Now()
	var sum uint64
	for i := uint64(0); i < pingRounds; i++ {
		toB, toA := make(chan uint64, 1), make(chan uint64, 1)
		doneB, doneA := make(chan struct{}), make(chan uint64, 1)
		go func() { toA <- (<-toB) + 1; close(doneB) }()
		go func(i uint64) { toB <- i; doneA <- <-toA }(i)
		sum += <-doneA
		<-doneB
	}
	if sum != pingRounds*(pingRounds-1)/2+pingRounds {
		panic("ping sum")
	}
	return time.Since(start)
}

// spawnPairControl: per round, two goroutines that return at once, both joined.
func spawnPairControl() time.Duration {
	start := time.Now()
	for i := uint64(0); i < pingRounds; i++ {
		db, da := make(chan uint64, 1), make(chan uint64, 1)
		go func(i uint64) { db <- i }(i)
		go func(i uint64) { da <- i }(i)
		<-da
		<-db
	}
	return time.Since(start)
}

func link(left int, done chan struct{}) {
	go func() {
		if left == 0 {
			close(done)
		} else {
			link(left-1, done)
		}
	}()
}

// chainedSpawn: each goroutine spawns the next, chain in all.
func chainedSpawn() time.Duration {
	start := time.Now()
	done := make(chan struct{})
	link(chain-1, done)
	<-done
	return time.Since(start)
}

//go:noinline
func xorshift(seed uint64) uint64 {
	x := seed
	for i := 0; i < xorshiftSteps; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// fanOutCompute: fanActors goroutines each run xorshiftSteps steps and send the result.
func fanOutCompute() time.Duration {
	start := time.Now()
	ch := make(chan uint64, fanActors)
	for i := uint64(0); i < fanActors; i++ {
		go func(i uint64) { ch <- xorshift(i + 1) }(i)
	}
	var sum uint64
	for i := 0; i < fanActors; i++ {
		sum += <-ch
	}
	_ = sum
	return time.Since(start)
}

func main() {
	fmt.Printf("%-20s %7s %12s %20s %s\n", "section", "threads", "median", "min..max", "unit")
	for _, t := range []int{1, 2} {
		runtime.GOMAXPROCS(t)
		rows := []struct {
			name string
			per  float64
			unit string
			f    func() time.Duration
		}{
			{"spawn_many", spawnN, "ns/spawn", func() time.Duration { return spawnStorm(0) }},
			{"spawn_storm_busy", spawnN, "ns/spawn", func() time.Duration { return spawnStorm(t) }},
			{"ping_pong_oneshot", pingRounds, "ns/round", pingPongOneshot},
			{"spawn_pair_control", pingRounds, "ns/round", spawnPairControl},
			{"chained_spawn", chain, "ns/spawn", chainedSpawn},
			{"fan_out_compute", fanActors, "ns/actor", fanOutCompute},
		}
		for _, r := range rows {
			r.f()
			v := make([]float64, repeats)
			for i := range v {
				v[i] = float64(r.f().Nanoseconds()) / r.per
			}
			sort.Float64s(v)
			fmt.Printf("%-20s %6dT %12.1f %9.1f..%-9.1f %s\n", r.name, t, v[repeats/2], v[0], v[repeats-1], r.unit)
		}
	}
}
