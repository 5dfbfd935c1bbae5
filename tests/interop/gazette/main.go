// Command gazette-interop answers questions about Gazette's message package
// (go.gazette.dev/core/message v0.100.0) for liftbridge-client's differential tests.
// It reads one JSON request per line on stdin and writes one JSON answer per line.
package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	log "github.com/sirupsen/logrus"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/labels"
	"go.gazette.dev/core/message"
)

type request struct {
	Op       string            `json:"op"`
	Producer string            `json:"producer"`
	Clock    uint64            `json:"clock"`
	Flags    uint16            `json:"flags"`
	UUID     string            `json:"uuid"`
	Steps    []clockStep       `json:"steps"`
	Payload  string            `json:"payload"`
	Data     string            `json:"data"`
	Doc      json.RawMessage   `json:"doc"`
	Fields   []string          `json:"fields"`
	Names    []string          `json:"names"`
	Keys     []string          `json:"keys"`
	Buffer   int               `json:"buffer"`
	Log      []logEntry        `json:"log"`
	Restart  int               `json:"restart_at"`
	Horizon  int64             `json:"horizon_ns"`
	Extra    map[string]string `json:"extra"`
}

type clockStep struct {
	Update *int64 `json:"update"`
	Tick   bool   `json:"tick"`
}

type logEntry struct {
	J string `json:"j"`
	B int64  `json:"b"`
	E int64  `json:"e"`
	U string `json:"u"`
}

// msg is the smallest Message: it only carries its UUID.
type msg struct{ id uuid.UUID }

func (m *msg) GetUUID() message.UUID                         { return m.id }
func (m *msg) SetUUID(u message.UUID)                        { m.id = u }
func (m *msg) NewAcknowledgement(pb.Journal) message.Message { return new(msg) }

// raw is a ProtoFrameable whose marshalled form is its bytes.
type raw []byte

func (r raw) ProtoSize() int                  { return len(r) }
func (r raw) MarshalTo(b []byte) (int, error) { return copy(b, r), nil }
func (r *raw) Unmarshal(b []byte) error       { *r = append((*r)[:0], b...); return nil }

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func producerOf(s string) message.ProducerID {
	var p message.ProducerID
	copy(p[:], mustHex(s))
	return p
}

func uuidOf(s string) uuid.UUID {
	var u uuid.UUID
	copy(u[:], mustHex(s))
	return u
}

func describe(u uuid.UUID) map[string]any {
	p := message.GetProducerID(u)
	return map[string]any{
		"uuid":     hex.EncodeToString(u[:]),
		"clock":    uint64(message.GetClock(u)),
		"flags":    uint16(message.GetFlags(u)),
		"producer": hex.EncodeToString(p[:]),
	}
}

func marshalWith(contentType string, m message.Frameable) string {
	f, err := message.FramingByContentType(contentType)
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	if err := f.Marshal(m, bw); err != nil {
		return "error: " + err.Error()
	}
	_ = bw.Flush()
	return hex.EncodeToString(b.Bytes())
}

func unpackFixed(data []byte) []map[string]string {
	r := bufio.NewReader(bytes.NewReader(data))
	var out []map[string]string
	for {
		b, err := message.UnpackFixedFrame(r)
		switch {
		case err == nil:
			out = append(out, map[string]string{"kind": "frame", "bytes": hex.EncodeToString(b)})
		case errors.Is(err, message.ErrDesyncDetected):
			out = append(out, map[string]string{"kind": "desync", "bytes": hex.EncodeToString(b)})
		case err == io.EOF:
			return append(out, map[string]string{"kind": "eof"})
		default:
			return append(out, map[string]string{"kind": "truncated"})
		}
	}
}

func mapping(names, keys []string) map[string][]int {
	lr := &pb.ListResponse{}
	index := map[pb.Journal]int{}
	for i, n := range names {
		lr.Journals = append(lr.Journals, pb.ListResponse_Journal{Spec: pb.JournalSpec{Name: pb.Journal(n)}})
		index[pb.Journal(n)] = i
	}
	parts := func() *pb.ListResponse { return lr }
	key := func(m message.Mappable, w io.Writer) { _, _ = w.Write(m.([]byte)) }
	modulo := message.ModuloMapping(key, parts)
	rendezvous := message.RendezvousMapping(key, parts)
	out := map[string][]int{"modulo": {}, "rendezvous": {}}
	for _, k := range keys {
		j, _, err := modulo(mustHex(k))
		if err != nil {
			panic(err)
		}
		out["modulo"] = append(out["modulo"], index[j])
		j, _, err = rendezvous(mustHex(k))
		if err != nil {
			panic(err)
		}
		out["rendezvous"] = append(out["rendezvous"], index[j])
	}
	return out
}

type event struct {
	Outcome  string     `json:"outcome"`
	Dequeued [][]any    `json:"dequeued"`
	Replay   []any      `json:"replay,omitempty"`
	Error    string     `json:"error,omitempty"`
	Check    *checkJSON `json:"checkpoint,omitempty"`
}

type checkJSON struct {
	Offsets map[string]int64 `json:"offsets"`
	States  [][]any          `json:"states"`
}

func envelopeOf(e logEntry) message.Envelope {
	return message.Envelope{
		Journal: &pb.JournalSpec{Name: pb.Journal(e.J)},
		Begin:   e.B,
		End:     e.E,
		Message: &msg{id: uuidOf(e.U)},
	}
}

// sequence feeds the log to a Sequencer (replays come from the log itself: the
// partition's entries in [begin, end)), optionally checkpointing at restart_at and
// continuing with a fresh Sequencer from the checkpoint's offsets.
func sequence(req request) []event {
	var events []event
	var seq = message.NewSequencer(nil, nil, req.Buffer)

	var feed func(entries []logEntry) bool
	feed = func(entries []logEntry) bool {
		for _, e := range entries {
			var ev = event{Dequeued: [][]any{}}
			var outcome = seq.QueueUncommitted(envelopeOf(e))
			ev.Outcome = outcome.String()
			if outcome == message.QueueAckCommitReplay {
				j, b, end := seq.ReplayRange()
				ev.Replay = []any{string(j), b, end}
				var replay []message.Envelope
				for _, r := range req.Log {
					if r.J == string(j) && r.B >= b && r.B < end && !seen(replay, r) {
						replay = append(replay, envelopeOf(r))
					}
				}
				var i int
				seq.StartReplay(message.IteratorFunc(func() (message.Envelope, error) {
					if i == len(replay) {
						return message.Envelope{}, io.EOF
					}
					i++
					return replay[i-1], nil
				}))
			}
			for {
				err := seq.Step()
				if err == io.EOF {
					break
				} else if err != nil {
					ev.Error = err.Error()
					events = append(events, ev)
					return false
				}
				ev.Dequeued = append(ev.Dequeued, []any{string(seq.Dequeued.Journal.Name), seq.Dequeued.Begin})
			}
			events = append(events, ev)
		}
		return true
	}

	if req.Restart < 0 || req.Restart > len(req.Log) {
		feed(req.Log)
		return events
	}
	if !feed(req.Log[:req.Restart]) {
		return events
	}
	offsets, states := seq.Checkpoint(time.Duration(req.Horizon))
	var cj = &checkJSON{Offsets: map[string]int64{}, States: [][]any{}}
	for j, o := range offsets {
		cj.Offsets[string(j)] = o
	}
	for _, s := range states {
		cj.States = append(cj.States, []any{string(s.Journal), hex.EncodeToString(s.Producer[:]), uint64(s.LastAck), s.Begin})
	}
	events = append(events, event{Outcome: "checkpoint", Dequeued: [][]any{}, Check: cj})
	// A fresh Sequencer restores from the checkpoint and reads from its offsets.
	seq = message.NewSequencer(offsets, states, req.Buffer)
	var rest []logEntry
	for _, e := range req.Log {
		if e.B >= offsets[pb.Journal(e.J)] && !seenEntry(rest, e) {
			rest = append(rest, e)
		}
	}
	feed(rest)
	return events
}

func seen(list []message.Envelope, e logEntry) bool {
	for _, r := range list {
		if string(r.Journal.Name) == e.J && r.Begin == e.B {
			return true
		}
	}
	return false
}

func seenEntry(list []logEntry, e logEntry) bool {
	for _, r := range list {
		if r.J == e.J && r.B == e.B {
			return true
		}
	}
	return false
}

func answer(req request) any {
	switch req.Op {
	case "uuid":
		return describe(message.BuildUUID(producerOf(req.Producer), message.Clock(req.Clock), message.Flags(req.Flags)))
	case "parse":
		return describe(uuidOf(req.UUID))
	case "clock":
		var c = message.Clock(req.Clock)
		var out []uint64
		for _, s := range req.Steps {
			if s.Update != nil {
				c.Update(time.Unix(0, *s.Update))
				out = append(out, uint64(c))
			} else {
				out = append(out, uint64(c.Tick()))
			}
		}
		return out
	case "fixed":
		var r = raw(mustHex(req.Payload))
		return marshalWith(labels.ContentType_ProtoFixed, &r)
	case "unpack_fixed":
		return unpackFixed(mustHex(req.Data))
	case "json":
		var d = json.NewDecoder(bytes.NewReader(req.Doc))
		d.UseNumber()
		var doc any
		if err := d.Decode(&doc); err != nil {
			panic(err)
		}
		return marshalWith(labels.ContentType_JSONLines, doc)
	case "csv":
		var rec = message.CSVRecord(req.Fields)
		return marshalWith(labels.ContentType_CSV, &rec)
	case "map":
		return mapping(req.Names, req.Keys)
	case "sequence":
		return sequence(req)
	}
	panic(fmt.Sprintf("unknown op %q", req.Op))
}

func main() {
	// The Sequencer logs every anomaly it meets; the generated logs are full of them.
	log.SetLevel(log.PanicLevel)
	var in = bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<28)
	var out = json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			panic(err)
		}
		if err := out.Encode(answer(req)); err != nil {
			panic(err)
		}
	}
}
