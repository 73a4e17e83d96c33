// The matrix with Sarama (Go; Debian's golang-github-shopify-sarama-dev), as common.py
// describes: produces every topic with its codec (acks=all, idempotent from protocol 0.11 on,
// explicit partitions, record timestamps), consumes all topics in a consumer group that
// commits what it marked when its session ends, reads the committed offsets back through the
// admin client and lists the earliest, latest and by-timestamp offsets; prints the same JSON
// line as the Python scripts. Built by the test with GOPATH=/usr/share/gocode (no modules).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

const partitions = 2

type spec struct {
	Bootstrap  string            `json:"bootstrap"`
	Topics     map[string]string `json:"topics"`
	N          int               `json:"n"`
	T0         int64             `json:"t0"`
	Group      string            `json:"group"`
	APIVersion []int             `json:"api_version"`
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "FAILED %s: %v\n", what, err)
	os.Exit(1)
}

// kafkaVersion is the protocol level the spec pins (Sarama picks each API's version from it),
// 2.1.0 (zstd, v2 batches) when the spec names none.
func kafkaVersion(s spec) sarama.KafkaVersion {
	text := "2.1.0"
	if len(s.APIVersion) > 0 {
		parts := make([]string, 0, 4)
		for _, p := range s.APIVersion {
			parts = append(parts, fmt.Sprint(p))
		}
		for s.APIVersion[0] == 0 && len(parts) < 4 {
			parts = append(parts, "0")
		}
		text = strings.Join(parts, ".")
	}
	v, err := sarama.ParseKafkaVersion(text)
	if err != nil {
		fail("version "+text, err)
	}
	return v
}

var codecs = map[string]sarama.CompressionCodec{"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4, "zstd": sarama.CompressionZSTD}

type collector struct {
	mu       sync.Mutex
	rows     [][]interface{}
	want     int
	complete chan struct{}
	once     sync.Once
}

func (c *collector) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (c *collector) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (c *collector) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		c.mu.Lock()
		c.rows = append(c.rows, []interface{}{m.Topic, m.Partition, m.Offset, string(m.Key), string(m.Value)})
		n := len(c.rows)
		c.mu.Unlock()
		sess.MarkMessage(m, "")
		if n >= c.want {
			c.once.Do(func() { close(c.complete) })
		}
	}
	return nil
}

func main() {
	var s spec
	if err := json.Unmarshal([]byte(os.Args[1]), &s); err != nil {
		fail("spec", err)
	}
	brokers := strings.Split(s.Bootstrap, ",")
	version := kafkaVersion(s)
	names := make([]string, 0, len(s.Topics))
	topics := make([]string, 0, len(s.Topics))
	for codec := range s.Topics {
		names = append(names, codec)
	}
	sort.Strings(names)
	for _, codec := range names {
		topics = append(topics, s.Topics[codec])
	}

	pc := sarama.NewConfig()
	pc.Version = version
	pc.ClientID = "sarama-matrix"
	pc.Producer.RequiredAcks = sarama.WaitForAll
	pc.Producer.Return.Successes = true
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	pc.Producer.Retry.Max = 10
	pc.Producer.Retry.Backoff = 200 * time.Millisecond
	pc.Metadata.Retry.Max = 20
	pc.Metadata.Retry.Backoff = 250 * time.Millisecond
	if version.IsAtLeast(sarama.V0_11_0_0) {
		pc.Producer.Idempotent = true
		pc.Net.MaxOpenRequests = 1
	}
	produced := map[string][][2]int64{}
	for _, codec := range names {
		pc.Producer.Compression = codecs[codec]
		producer, err := sarama.NewSyncProducer(brokers, pc)
		if err != nil {
			fail("producer", err)
		}
		rows := make([][2]int64, 0, s.N)
		for b := 0; b < s.N; b += 50 { // several requests, so several batches per partition
			msgs := []*sarama.ProducerMessage{}
			for i := b; i < b+50 && i < s.N; i++ {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: s.Topics[codec], Partition: int32(i % partitions),
					Key:       sarama.StringEncoder(fmt.Sprintf("k%d", i)),
					Value:     sarama.StringEncoder(strings.Repeat(fmt.Sprintf("%s-value-%d-", codec, i), 6)),
					Timestamp: time.Unix(0, (s.T0+int64(i))*int64(time.Millisecond))})
			}
			if err := producer.SendMessages(msgs); err != nil {
				fail("send "+codec, err)
			}
			for _, m := range msgs {
				rows = append(rows, [2]int64{int64(m.Partition), m.Offset})
			}
		}
		if err := producer.Close(); err != nil {
			fail("producer close", err)
		}
		produced[codec] = rows
	}

	cc := sarama.NewConfig()
	cc.Version = version
	cc.ClientID = "sarama-matrix"
	cc.Consumer.Offsets.Initial = sarama.OffsetOldest
	cc.Consumer.Return.Errors = true
	cc.Metadata.Retry.Max = 20
	group, err := sarama.NewConsumerGroup(brokers, s.Group, cc)
	if err != nil {
		fail("consumer group", err)
	}
	go func() {
		for err := range group.Errors() {
			fmt.Fprintln(os.Stderr, "group error:", err)
		}
	}()
	col := &collector{want: s.N * len(topics), complete: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			if err := group.Consume(ctx, topics, col); err != nil {
				fmt.Fprintln(os.Stderr, "consume:", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	select {
	case <-col.complete:
	case <-time.After(90 * time.Second):
		fail("consume", fmt.Errorf("%d of %d records after 90 s", len(col.rows), col.want))
	}
	cancel()
	<-stopped // the session ended: its offset manager committed what was marked
	if err := group.Close(); err != nil {
		fail("group close", err)
	}

	admin, err := sarama.NewClusterAdmin(brokers, cc)
	if err != nil {
		fail("admin", err)
	}
	ask := map[string][]int32{}
	for _, t := range topics {
		ask[t] = []int32{0, 1}
	}
	fetched, err := admin.ListConsumerGroupOffsets(s.Group, ask)
	if err != nil {
		fail("committed offsets", err)
	}
	client, err := sarama.NewClient(brokers, cc)
	if err != nil {
		fail("client", err)
	}
	target := s.T0 + int64(s.N/2)
	committed, earliest, latest, byTime := map[string]map[string]int64{}, map[string]map[string]int64{},
		map[string]map[string]int64{}, map[string]map[string]int64{}
	for _, t := range topics {
		committed[t], earliest[t], latest[t], byTime[t] = map[string]int64{}, map[string]int64{},
			map[string]int64{}, map[string]int64{}
		for p := int32(0); p < partitions; p++ {
			block := fetched.GetBlock(t, p)
			if block == nil || block.Err != sarama.ErrNoError {
				fail("committed offset", fmt.Errorf("%s-%d: %v", t, p, block))
			}
			key := fmt.Sprint(p)
			committed[t][key] = block.Offset
			for _, q := range []struct {
				at  int64
				out map[string]int64
			}{{sarama.OffsetOldest, earliest[t]}, {sarama.OffsetNewest, latest[t]}, {target, byTime[t]}} {
				off, err := client.GetOffset(t, p, q.at)
				if err != nil {
					fail("list offsets", err)
				}
				q.out[key] = off
			}
		}
	}
	admin.Close()
	client.Close()
	out, err := json.Marshal(map[string]interface{}{"client": "sarama", "version": "debian-golang-github-shopify-sarama-dev", "produced": produced,
		"consumed": col.rows, "committed": committed, "earliest": earliest, "latest": latest, "by_time": byTime,
		"by_time_target": target})
	if err != nil {
		fail("json", err)
	}
	fmt.Println(string(out))
}
