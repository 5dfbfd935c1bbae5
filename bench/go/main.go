// Command bench-go measures go-liftbridge v2.4.0 against a running Liftbridge
// server for the Python benchmark runner (python -m bench).
//
// Every run prints exactly one JSON object on stdout; failures go to stderr
// with exit status 1. Streams are created by the runner beforehand.
//
//	bench-go pub -addr A -stream S -n N -size B -partitions P -ack leader|all -mode sync|batch|async|rate [-batch 100] [-rate R]
//	bench-go sub -addr A -stream S -counts C0,C1,...
//
// pub modes:
//
//	sync   Publish and wait for each ack before the next message.
//	batch  PublishAsync -batch messages, wait for all their acks, repeat
//	       (the "pub-batch" style of the upstream producer benchmark).
//	async  PublishAsync every message back to back, never waiting, then wait
//	       for every ack: go-liftbridge's fastest pipelined publish ("go-async").
//	rate   PublishAsync at a fixed offered rate (-rate msgs/s), never waiting.
//
// Messages go to partitions round robin (message i to partition i % P).
// Publish-to-ack latencies are reported in microseconds.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	lift "github.com/liftbridge-io/go-liftbridge/v2"
)

type pubResult struct {
	Client      string    `json:"client"`
	Op          string    `json:"op"`
	Mode        string    `json:"mode"`
	Messages    int       `json:"messages"`
	Acked       int64     `json:"acked"`
	Errors      int64     `json:"errors"`
	FirstError  string    `json:"first_error,omitempty"`
	Seconds     float64   `json:"seconds"`
	CPUSeconds  float64   `json:"cpu_s"`
	LatenciesUs []float64 `json:"latencies_us"`
}

type subResult struct {
	Client     string  `json:"client"`
	Op         string  `json:"op"`
	Messages   int64   `json:"messages"`
	Bytes      int64   `json:"bytes"`
	OutOfOrder int64   `json:"out_of_order"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_s"`
}

// cpuSeconds is the process's user+system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: bench-go pub|sub [flags]"))
	}
	var (
		out any
		err error
	)
	switch os.Args[1] {
	case "pub":
		out, err = runPub(os.Args[2:])
	case "sub":
		out, err = runSub(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-go:", err)
	os.Exit(1)
}

// errorRecorder counts errors and keeps the first one.
type errorRecorder struct {
	count atomic.Int64
	once  sync.Once
	first string
}

func (e *errorRecorder) add(err error) {
	e.count.Add(1)
	e.once.Do(func() { e.first = err.Error() })
}

func runPub(args []string) (*pubResult, error) {
	fs := flag.NewFlagSet("pub", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9292", "gRPC address")
	stream := fs.String("stream", "", "stream name")
	n := fs.Int("n", 10000, "messages")
	size := fs.Int("size", 256, "value size in bytes")
	partitions := fs.Int("partitions", 1, "partitions of the stream")
	ack := fs.String("ack", "leader", "ack policy: leader|all")
	mode := fs.String("mode", "sync", "sync|batch|async|rate")
	batch := fs.Int("batch", 100, "messages per batch (batch mode)")
	rate := fs.Float64("rate", 1000, "offered msgs/s (rate mode)")
	timeout := fs.Duration("timeout", 120*time.Second, "overall deadline")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *stream == "" || *n <= 0 || *partitions <= 0 || *batch <= 0 || *rate <= 0 {
		return nil, errors.New("pub: bad arguments")
	}
	var policy lift.MessageOption
	switch *ack {
	case "leader":
		policy = lift.AckPolicyLeader()
	case "all":
		policy = lift.AckPolicyAll()
	default:
		return nil, fmt.Errorf("unknown ack policy %q", *ack)
	}
	client, err := lift.Connect([]string{*addr})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	value := make([]byte, *size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	// Warm the metadata cache and connection outside the measurement.
	if _, err := client.FetchMetadata(ctx); err != nil {
		return nil, err
	}

	res := &pubResult{Client: "go-liftbridge", Op: "pub", Mode: *mode, Messages: *n}
	lat := make([]float64, *n)
	var errs errorRecorder
	var acked atomic.Int64
	cpu0 := cpuSeconds()
	start := time.Now()
	switch *mode {
	case "sync":
		for i := 0; i < *n; i++ {
			t0 := time.Now()
			_, err := client.Publish(ctx, *stream, value, policy, lift.ToPartition(int32(i%*partitions)))
			if err != nil {
				errs.add(err)
				continue
			}
			lat[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
			acked.Add(1)
		}
	case "batch", "async", "rate":
		var wg sync.WaitGroup
		interval := time.Duration(float64(time.Second) / *rate)
		for i := 0; i < *n; i++ {
			if *mode == "rate" {
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
			}
			wg.Add(1)
			idx := i
			t0 := time.Now()
			err := client.PublishAsync(ctx, *stream, value, func(_ *lift.Ack, err error) {
				defer wg.Done()
				if err != nil {
					errs.add(err)
					return
				}
				lat[idx] = float64(time.Since(t0).Nanoseconds()) / 1e3
				acked.Add(1)
			}, policy, lift.ToPartition(int32(i%*partitions)))
			if err != nil {
				wg.Done()
				errs.add(err)
			}
			if *mode == "batch" && (i+1)%*batch == 0 {
				wg.Wait()
			}
		}
		wg.Wait()
	default:
		return nil, fmt.Errorf("unknown mode %q", *mode)
	}
	res.Seconds = time.Since(start).Seconds()
	res.CPUSeconds = cpuSeconds() - cpu0
	res.Acked = acked.Load()
	res.Errors = errs.count.Load()
	res.FirstError = errs.first
	res.LatenciesUs = make([]float64, 0, res.Acked)
	for _, l := range lat {
		if l > 0 {
			res.LatenciesUs = append(res.LatenciesUs, l)
		}
	}
	return res, nil
}

func runSub(args []string) (*subResult, error) {
	fs := flag.NewFlagSet("sub", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9292", "gRPC address")
	stream := fs.String("stream", "", "stream name")
	countsFlag := fs.String("counts", "", "messages to read from each partition, comma separated (offsets 0..c-1)")
	timeout := fs.Duration("timeout", 300*time.Second, "overall deadline")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var counts []int64
	for _, f := range strings.Split(*countsFlag, ",") {
		c, err := strconv.ParseInt(f, 10, 64)
		if err != nil || c < 0 {
			return nil, fmt.Errorf("sub: bad -counts %q", *countsFlag)
		}
		counts = append(counts, c)
	}
	if *stream == "" {
		return nil, errors.New("sub: bad arguments")
	}
	client, err := lift.Connect([]string{*addr})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if _, err := client.FetchMetadata(ctx); err != nil {
		return nil, err
	}

	res := &subResult{Client: "go-liftbridge", Op: "sub"}
	var (
		total, bytes, disorder atomic.Int64
		errs                   errorRecorder
		wg                     sync.WaitGroup
	)
	subCtx, subCancel := context.WithCancel(ctx)
	defer subCancel()
	cpu0 := cpuSeconds()
	start := time.Now()
	for p, n := range counts {
		if n == 0 {
			continue
		}
		wg.Add(1)
		var (
			next int64
			once sync.Once
		)
		err := client.Subscribe(subCtx, *stream, func(msg *lift.Message, err error) {
			if err != nil {
				if next < n {
					errs.add(err)
				}
				once.Do(wg.Done)
				return
			}
			if msg.Offset() != next {
				disorder.Add(1)
			}
			next = msg.Offset() + 1
			total.Add(1)
			bytes.Add(int64(len(msg.Value())))
			if next >= n {
				once.Do(wg.Done)
			}
		}, lift.Partition(int32(p)), lift.StartAtEarliestReceived(), lift.StopAtOffset(n-1))
		if err != nil {
			return nil, err
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("sub: timed out after %d messages", total.Load())
	}
	res.Seconds = time.Since(start).Seconds()
	res.CPUSeconds = cpuSeconds() - cpu0
	res.Messages = total.Load()
	res.Bytes = bytes.Load()
	res.OutOfOrder = disorder.Load()
	if errs.count.Load() > 0 {
		return nil, fmt.Errorf("sub: %s", errs.first)
	}
	return res, nil
}
