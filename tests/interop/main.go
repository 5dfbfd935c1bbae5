// Command interop drives the official Go client, go-liftbridge, so that the
// Python test suite (test_go_interop.py) can compare bytes and decisions with
// it. It needs no Liftbridge or NATS server.
//
// Every subcommand reads one JSON document on stdin and writes one JSON
// document on stdout. Byte strings travel hex-encoded. A failure that concerns
// one item is reported in that item's "error" field; anything else (bad input,
// a failed listener) goes to stderr with exit status 1.
//
//	envelopes          NewMessage bytes for a list of cases
//	decode-acks        UnmarshalAck on a list of envelopes
//	decode-messages    UnmarshalMessage on a list of envelopes
//	partition          the key and round-robin partitioners
//	cursor-partition   the __cursors partition SetCursor is routed to
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	lift "github.com/liftbridge-io/go-liftbridge/v2"
	api "github.com/liftbridge-io/liftbridge-api/v2/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

func main() {
	if len(os.Args) != 2 {
		fail(errors.New("usage: interop envelopes|decode-acks|decode-messages|partition|cursor-partition < input.json"))
	}
	var (
		out any
		err error
	)
	switch os.Args[1] {
	case "envelopes":
		out, err = runEnvelopes(os.Stdin)
	case "decode-acks":
		out, err = runDecodeAcks(os.Stdin)
	case "decode-messages":
		out, err = runDecodeMessages(os.Stdin)
	case "partition":
		out, err = runPartition(os.Stdin)
	case "cursor-partition":
		out, err = runCursorPartition(os.Stdin)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "interop:", err)
	os.Exit(1)
}

func readJSON(r io.Reader, into any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("reading input: %w", err)
	}
	return nil
}

// hexBytes is a byte string that travels as hex in JSON; null stays nil.
type hexBytes []byte

func (h hexBytes) MarshalJSON() ([]byte, error) {
	if h == nil {
		return []byte("null"), nil
	}
	return json.Marshal(hex.EncodeToString(h))
}

func (h *hexBytes) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*h = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return err
	}
	*h = hexBytes(b)
	if *h == nil {
		*h = hexBytes{}
	}
	return nil
}

func hexMap(m map[string][]byte) map[string]hexBytes {
	out := make(map[string]hexBytes, len(m))
	for k, v := range m {
		if v == nil {
			v = []byte{}
		}
		out[k] = hexBytes(v)
	}
	return out
}

// guard turns a panic inside go-liftbridge into an item error, so that inputs
// which crash it are reported rather than ending the run.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// ---------------------------------------------------------------- envelopes

type headerPair struct {
	Name  string   `json:"name"`
	Value hexBytes `json:"value"`
}

// envelopeCase lists NewMessage options; a null field means "option not given".
type envelopeCase struct {
	Name           string              `json:"name"`
	Value          hexBytes            `json:"value"`
	Key            hexBytes            `json:"key"`
	Headers        map[string]hexBytes `json:"headers"`
	HeaderCalls    []headerPair        `json:"header_calls"`
	AckInbox       *string             `json:"ack_inbox"`
	CorrelationID  *string             `json:"correlation_id"`
	AckPolicy      *string             `json:"ack_policy"`
	ExpectedOffset *int64              `json:"expected_offset"`
	ToPartition    *int32              `json:"to_partition"`
	PartitionByKey bool                `json:"partition_by_key"`
}

type envelopeResult struct {
	Name  string   `json:"name"`
	Data  hexBytes `json:"data"`
	Error string   `json:"error,omitempty"`
}

func runEnvelopes(r io.Reader) (any, error) {
	var cases []envelopeCase
	if err := readJSON(r, &cases); err != nil {
		return nil, err
	}
	results := make([]envelopeResult, 0, len(cases))
	for _, c := range cases {
		opts, err := messageOptions(c)
		res := envelopeResult{Name: c.Name}
		if err == nil {
			err = guard(func() error {
				res.Data = lift.NewMessage(c.Value, opts...)
				return nil
			})
		}
		if err != nil {
			res.Error = err.Error()
		}
		results = append(results, res)
	}
	return results, nil
}

func messageOptions(c envelopeCase) ([]lift.MessageOption, error) {
	var opts []lift.MessageOption
	if c.Key != nil {
		opts = append(opts, lift.Key(c.Key))
	}
	if c.Headers != nil {
		headers := make(map[string][]byte, len(c.Headers))
		for k, v := range c.Headers {
			headers[k] = v
		}
		opts = append(opts, lift.Headers(headers))
	}
	for _, h := range c.HeaderCalls {
		opts = append(opts, lift.Header(h.Name, h.Value))
	}
	if c.AckInbox != nil {
		opts = append(opts, lift.AckInbox(*c.AckInbox))
	}
	if c.CorrelationID != nil {
		opts = append(opts, lift.CorrelationID(*c.CorrelationID))
	}
	if c.AckPolicy != nil {
		switch *c.AckPolicy {
		case "LEADER":
			opts = append(opts, lift.AckPolicyLeader())
		case "ALL":
			opts = append(opts, lift.AckPolicyAll())
		case "NONE":
			opts = append(opts, lift.AckPolicyNone())
		default:
			return nil, fmt.Errorf("unknown ack policy %q", *c.AckPolicy)
		}
	}
	if c.ExpectedOffset != nil {
		opts = append(opts, lift.ExpectedOffset(*c.ExpectedOffset))
	}
	if c.ToPartition != nil {
		opts = append(opts, lift.ToPartition(*c.ToPartition))
	}
	if c.PartitionByKey {
		opts = append(opts, lift.PartitionByKey())
	}
	return opts, nil
}

// ---------------------------------------------------------------- decode-acks

type ackResult struct {
	Error              string `json:"error,omitempty"`
	Stream             string `json:"stream"`
	PartitionSubject   string `json:"partition_subject"`
	MsgSubject         string `json:"msg_subject"`
	Offset             int64  `json:"offset"`
	AckInbox           string `json:"ack_inbox"`
	CorrelationID      string `json:"correlation_id"`
	AckPolicy          int32  `json:"ack_policy"`
	ReceptionTimestamp int64  `json:"reception_timestamp"`
	CommitTimestamp    int64  `json:"commit_timestamp"`
	// go-liftbridge's Ack has no accessor for ackError; this is the wire
	// field, read from the payload with the vendored proto package.
	WireAckError int32 `json:"wire_ack_error"`
}

func runDecodeAcks(r io.Reader) (any, error) {
	var inputs []hexBytes
	if err := readJSON(r, &inputs); err != nil {
		return nil, err
	}
	results := make([]ackResult, 0, len(inputs))
	for _, data := range inputs {
		var res ackResult
		err := guard(func() error {
			ack, err := lift.UnmarshalAck(data)
			if err != nil {
				return err
			}
			res = ackResult{
				Stream:             ack.Stream(),
				PartitionSubject:   ack.PartitionSubject(),
				MsgSubject:         ack.MessageSubject(),
				Offset:             ack.Offset(),
				AckInbox:           ack.AckInbox(),
				CorrelationID:      ack.CorrelationID(),
				AckPolicy:          int32(ack.AckPolicy()),
				ReceptionTimestamp: ack.ReceptionTimestamp().UnixNano(),
				CommitTimestamp:    ack.CommitTimestamp().UnixNano(),
			}
			wire := new(api.Ack)
			if err := proto.Unmarshal(data[data[5]:], wire); err != nil {
				return fmt.Errorf("payload accepted by UnmarshalAck but not by proto: %w", err)
			}
			res.WireAckError = int32(wire.GetAckError())
			return nil
		})
		if err != nil {
			res = ackResult{Error: err.Error()}
		}
		results = append(results, res)
	}
	return results, nil
}

// ---------------------------------------------------------------- decode-messages

type messageResult struct {
	Error        string              `json:"error,omitempty"`
	Offset       int64               `json:"offset"`
	Key          hexBytes            `json:"key"`
	Value        hexBytes            `json:"value"`
	Headers      map[string]hexBytes `json:"headers"`
	Timestamp    int64               `json:"timestamp"`
	Stream       string              `json:"stream"`
	Partition    int32               `json:"partition"`
	Subject      string              `json:"subject"`
	ReplySubject string              `json:"reply_subject"`
	// go-liftbridge's Message has no accessors for these three publish-side
	// fields; they are read from the payload with the vendored proto package
	// once UnmarshalMessage has accepted the envelope.
	AckInbox      string `json:"ack_inbox"`
	CorrelationID string `json:"correlation_id"`
	AckPolicy     int32  `json:"ack_policy"`
}

func runDecodeMessages(r io.Reader) (any, error) {
	var inputs []hexBytes
	if err := readJSON(r, &inputs); err != nil {
		return nil, err
	}
	results := make([]messageResult, 0, len(inputs))
	for _, data := range inputs {
		var res messageResult
		err := guard(func() error {
			msg, err := lift.UnmarshalMessage(data)
			if err != nil {
				return err
			}
			res = messageResult{
				Offset:       msg.Offset(),
				Key:          orEmpty(msg.Key()),
				Value:        orEmpty(msg.Value()),
				Headers:      hexMap(msg.Headers()),
				Timestamp:    msg.Timestamp().UnixNano(),
				Stream:       msg.Stream(),
				Partition:    msg.Partition(),
				Subject:      msg.Subject(),
				ReplySubject: msg.ReplySubject(),
			}
			wire := new(api.Message)
			if err := proto.Unmarshal(data[data[5]:], wire); err != nil {
				return fmt.Errorf("payload accepted by UnmarshalMessage but not by proto: %w", err)
			}
			res.AckInbox = wire.GetAckInbox()
			res.CorrelationID = wire.GetCorrelationId()
			res.AckPolicy = int32(wire.GetAckPolicy())
			return nil
		})
		if err != nil {
			res = messageResult{Error: err.Error()}
		}
		results = append(results, res)
	}
	return results, nil
}

func orEmpty(b []byte) hexBytes {
	if b == nil {
		return hexBytes{}
	}
	return hexBytes(b)
}

// ---------------------------------------------------------------- fake cluster

// go-liftbridge's partitioners read the partition count from a *Metadata,
// which has no public constructor: only Client.FetchMetadata builds one. So
// the program answers go-liftbridge's own RPCs from an in-process gRPC API
// server on loopback that knows nothing but the streams it is told about.

type fakeStream struct {
	name       string
	partitions int32
}

type fakeCluster struct {
	servers []*grpc.Server
	addrs   []string
	ports   []int32
	streams []fakeStream
	// hits receives the index of the broker that served a SetCursor call.
	hits chan int
}

type fakeBroker struct {
	api.UnimplementedAPIServer
	cluster *fakeCluster
	index   int
}

// startFakeCluster listens on n loopback ports. Partition i of every stream is
// led by broker i mod n.
func startFakeCluster(n int, streams []fakeStream) (*fakeCluster, error) {
	c := &fakeCluster{streams: streams, hits: make(chan int, 1)}
	for i := 0; i < n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.stop()
			return nil, err
		}
		srv := grpc.NewServer()
		api.RegisterAPIServer(srv, &fakeBroker{cluster: c, index: i})
		go func() { _ = srv.Serve(lis) }()
		c.servers = append(c.servers, srv)
		c.addrs = append(c.addrs, lis.Addr().String())
		c.ports = append(c.ports, int32(lis.Addr().(*net.TCPAddr).Port))
	}
	return c, nil
}

func (c *fakeCluster) stop() {
	for _, srv := range c.servers {
		srv.Stop()
	}
}

func (c *fakeCluster) connect(ctx context.Context) (lift.Client, error) {
	return lift.ConnectCtx(ctx, c.addrs[:1])
}

func (b *fakeBroker) FetchMetadata(ctx context.Context, req *api.FetchMetadataRequest) (*api.FetchMetadataResponse, error) {
	c := b.cluster
	resp := &api.FetchMetadataResponse{}
	for i, port := range c.ports {
		resp.Brokers = append(resp.Brokers, &api.Broker{
			Id:   "b" + strconv.Itoa(i),
			Host: "127.0.0.1",
			Port: port,
		})
	}
	for _, s := range c.streams {
		sm := &api.StreamMetadata{
			Name:       s.name,
			Subject:    s.name,
			Partitions: map[int32]*api.PartitionMetadata{},
		}
		for p := int32(0); p < s.partitions; p++ {
			leader := "b" + strconv.Itoa(int(p)%len(c.ports))
			sm.Partitions[p] = &api.PartitionMetadata{
				Id:       p,
				Leader:   leader,
				Replicas: []string{leader},
				Isr:      []string{leader},
			}
		}
		resp.StreamMetadata = append(resp.StreamMetadata, sm)
	}
	return resp, nil
}

func (b *fakeBroker) PublishAsync(stream api.API_PublishAsyncServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

func (b *fakeBroker) SetCursor(ctx context.Context, req *api.SetCursorRequest) (*api.SetCursorResponse, error) {
	b.cluster.hits <- b.index
	return &api.SetCursorResponse{}, nil
}

// ---------------------------------------------------------------- partition

type keyCase struct {
	Key        hexBytes `json:"key"`
	Partitions int32    `json:"partitions"`
}

type roundRobinCase struct {
	Partitions int32 `json:"partitions"`
	Calls      int   `json:"calls"`
}

type partitionInput struct {
	Key        []keyCase        `json:"key"`
	RoundRobin []roundRobinCase `json:"round_robin"`
}

type partitionOutput struct {
	Key        []int32   `json:"key"`
	RoundRobin [][]int32 `json:"round_robin"`
}

func runPartition(r io.Reader) (any, error) {
	var in partitionInput
	if err := readJSON(r, &in); err != nil {
		return nil, err
	}
	// One stream per partition count for the key partitioner, and a fresh
	// stream per round-robin case (its counter is per stream name and global).
	var streams []fakeStream
	seen := map[int32]bool{}
	for _, kc := range in.Key {
		if !seen[kc.Partitions] {
			seen[kc.Partitions] = true
			streams = append(streams, fakeStream{keyStream(kc.Partitions), kc.Partitions})
		}
	}
	for i, rc := range in.RoundRobin {
		streams = append(streams, fakeStream{"rr-" + strconv.Itoa(i), rc.Partitions})
	}
	cluster, err := startFakeCluster(1, streams)
	if err != nil {
		return nil, err
	}
	defer cluster.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := cluster.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to the in-process API server: %w", err)
	}
	defer client.Close()
	metadata, err := client.FetchMetadata(ctx)
	if err != nil {
		return nil, err
	}

	out := partitionOutput{Key: []int32{}, RoundRobin: [][]int32{}}
	byKey := partitionerOf(lift.PartitionByKey())
	for _, kc := range in.Key {
		out.Key = append(out.Key, byKey.Partition(keyStream(kc.Partitions), kc.Key, nil, metadata))
	}
	roundRobin := partitionerOf(lift.PartitionByRoundRobin())
	for i, rc := range in.RoundRobin {
		seq := make([]int32, 0, rc.Calls)
		for j := 0; j < rc.Calls; j++ {
			seq = append(seq, roundRobin.Partition("rr-"+strconv.Itoa(i), nil, nil, metadata))
		}
		out.RoundRobin = append(out.RoundRobin, seq)
	}
	return out, nil
}

func keyStream(partitions int32) string {
	return "key-" + strconv.Itoa(int(partitions))
}

// partitionerOf applies a MessageOption and returns the Partitioner it sets:
// the public way to reach go-liftbridge's built-in partitioners.
func partitionerOf(opt lift.MessageOption) lift.Partitioner {
	opts := &lift.MessageOptions{Headers: map[string][]byte{}}
	opt(opts)
	return opts.Partitioner
}

// ---------------------------------------------------------------- cursor-partition

type cursorCase struct {
	CursorID   string `json:"cursor_id"`
	Stream     string `json:"stream"`
	Partition  int32  `json:"partition"`
	Partitions int32  `json:"partitions"`
}

type cursorResult struct {
	Partition int32  `json:"partition"`
	Error     string `json:"error,omitempty"`
}

// go-liftbridge does not expose its cursor hash. It is observed instead:
// with one broker per __cursors partition, the broker that receives
// SetCursor names the partition the client picked.
func runCursorPartition(r io.Reader) (any, error) {
	var cases []cursorCase
	if err := readJSON(r, &cases); err != nil {
		return nil, err
	}
	results := make([]cursorResult, len(cases))
	byCount := map[int32][]int{}
	var counts []int32
	for i, cc := range cases {
		if cc.Partitions < 1 {
			return nil, fmt.Errorf("case %d: partitions must be at least 1", i)
		}
		if _, ok := byCount[cc.Partitions]; !ok {
			counts = append(counts, cc.Partitions)
		}
		byCount[cc.Partitions] = append(byCount[cc.Partitions], i)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(counts))
	for ci, n := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[ci] = cursorRound(n, cases, byCount[n], results)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

func cursorRound(n int32, cases []cursorCase, indexes []int, results []cursorResult) error {
	cluster, err := startFakeCluster(int(n), []fakeStream{{"__cursors", n}})
	if err != nil {
		return err
	}
	defer cluster.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := cluster.connect(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the in-process API server: %w", err)
	}
	defer client.Close()
	for _, i := range indexes {
		cc := cases[i]
		if err := client.SetCursor(ctx, cc.CursorID, cc.Stream, cc.Partition, 0); err != nil {
			results[i] = cursorResult{Partition: -1, Error: err.Error()}
			continue
		}
		select {
		case hit := <-cluster.hits:
			results[i] = cursorResult{Partition: int32(hit)}
		default:
			results[i] = cursorResult{Partition: -1, Error: "SetCursor reached no broker"}
		}
	}
	return nil
}
