package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/crownmq/crown/cmd/crown-chaos/history"
)

// Node is one broker node the workload may talk to.
type Node struct {
	ID  string
	URL string
}

// Client sends the Queen requests of the workload and classifies each
// outcome as ok, fail or unknown (see package history). It never retries:
// retries are the workers' decisions and each attempt is recorded.
type Client struct {
	HTTP *http.Client
}

// NewClient returns a client with short dial timeouts (a partitioned node
// must not hold a worker for long) and pooled keep-alive connections.
func NewClient() *Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{HTTP: &http.Client{Transport: tr}}
}

// CloseIdle drops pooled connections (after a node was killed or restarted).
func (c *Client) CloseIdle() { c.HTTP.CloseIdleConnections() }

// Answer is the classified answer to one request.
type Answer struct {
	Outcome string // history.OK, Fail or Unknown
	Status  int
	Error   string // empty when ok
	Body    []byte
}

// Classify maps a transport error or an HTTP answer to an outcome. A
// request that was never sent (the connection could not be made) and an
// answer that documents that nothing was applied (4xx, 503 no_leader)
// fail; a 2xx is ok; anything else (timeouts, resets, other 5xx) is
// unknown: the request may have been applied.
func Classify(status int, code string, err error) string {
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return history.Fail
		}
		return history.Unknown
	}
	switch {
	case status/100 == 2:
		return history.OK
	case status/100 == 4:
		return history.Fail
	case status == http.StatusServiceUnavailable && code == "no_leader":
		return history.Fail
	}
	return history.Unknown
}

func (c *Client) do(ctx context.Context, method, u string, body any) Answer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Answer{Outcome: history.Fail, Error: err.Error()}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return Answer{Outcome: history.Fail, Error: err.Error()}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Answer{Outcome: Classify(0, "", err), Error: shortErr(err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{Outcome: history.Unknown, Status: resp.StatusCode, Error: "read body: " + shortErr(err)}
	}
	a := Answer{Status: resp.StatusCode, Body: b}
	var eb struct {
		Code  string `json:"code"`
		Error string `json:"error"`
	}
	if resp.StatusCode/100 != 2 {
		_ = json.Unmarshal(b, &eb)
		a.Error = fmt.Sprintf("%d %s", resp.StatusCode, eb.Code)
		if eb.Code == "" {
			a.Error = fmt.Sprintf("%d %.80s", resp.StatusCode, b)
		}
	}
	a.Outcome = Classify(resp.StatusCode, eb.Code, nil)
	return a
}

func shortErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

// PushItem is one message to push.
type PushItem struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	Payload       any    `json:"payload"`
	TransactionID string `json:"transactionId"`
}

// PushResult is one entry of a push answer.
type PushResult struct {
	Status    string `json:"status"`
	MessageID string `json:"message_id"`
	Error     string `json:"error"`
}

// Push posts items; results are decoded when the answer is ok.
func (c *Client) Push(ctx context.Context, base string, items []PushItem) ([]PushResult, Answer) {
	a := c.do(ctx, "POST", base+"/api/v1/push", map[string]any{"items": items})
	if a.Outcome != history.OK {
		return nil, a
	}
	var out []PushResult
	if err := json.Unmarshal(a.Body, &out); err != nil || len(out) != len(items) {
		a.Outcome, a.Error = history.Unknown, fmt.Sprintf("bad push answer (%d results for %d items): %.100s", len(out), len(items), a.Body)
		return nil, a
	}
	return out, a
}

// PopParams are the pop parameters the workload uses.
type PopParams struct {
	Group        string // "" is queue mode
	Batch        int
	WaitMillis   int // 0: no long-poll
	LeaseSeconds int
	Partitions   int
}

// Message is one popped message.
type Message struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	LeaseID       string          `json:"leaseId"`
	Data          json.RawMessage `json:"data"`
	RetryCount    int             `json:"retryCount"`
}

// Pop pops from queue (wildcard form).
func (c *Client) Pop(ctx context.Context, base, queue string, p PopParams) ([]Message, Answer) {
	q := url.Values{}
	if p.Group != "" {
		q.Set("consumerGroup", p.Group)
	}
	q.Set("batch", strconv.Itoa(max(p.Batch, 1)))
	if p.WaitMillis > 0 {
		q.Set("wait", "true")
		q.Set("timeout", strconv.Itoa(p.WaitMillis))
	} else {
		q.Set("wait", "false")
	}
	if p.LeaseSeconds > 0 {
		q.Set("leaseSeconds", strconv.Itoa(p.LeaseSeconds))
	}
	if p.Partitions > 1 {
		q.Set("partitions", strconv.Itoa(p.Partitions))
	}
	a := c.do(ctx, "GET", base+"/api/v1/pop/queue/"+url.PathEscape(queue)+"?"+q.Encode(), nil)
	if a.Outcome != history.OK || a.Status == http.StatusNoContent || len(a.Body) == 0 {
		return nil, a
	}
	var out struct {
		Messages []Message `json:"messages"`
	}
	if err := json.Unmarshal(a.Body, &out); err != nil {
		// The pop committed (2xx) but we cannot tell what it leased.
		a.Outcome, a.Error = history.Unknown, fmt.Sprintf("bad pop answer: %.100s", a.Body)
		return nil, a
	}
	return out.Messages, a
}

// Ack is one acknowledgment.
type Ack struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId,omitempty"`
	Status        string `json:"status"`
}

// AckResult is one entry of an ack answer.
type AckResult struct {
	Success bool    `json:"success"`
	Error   *string `json:"error"`
}

// AckBatch posts acks for group ("" is queue mode).
func (c *Client) AckBatch(ctx context.Context, base, group string, acks []Ack) ([]AckResult, Answer) {
	body := map[string]any{"acknowledgments": acks}
	if group != "" {
		body["consumerGroup"] = group
	}
	a := c.do(ctx, "POST", base+"/api/v1/ack/batch", body)
	if a.Outcome != history.OK {
		return nil, a
	}
	var out []AckResult
	if err := json.Unmarshal(a.Body, &out); err != nil || len(out) != len(acks) {
		a.Outcome, a.Error = history.Unknown, fmt.Sprintf("bad ack answer: %.100s", a.Body)
		return nil, a
	}
	return out, a
}

// Configure replaces a queue's options.
func (c *Client) Configure(ctx context.Context, base, queue string, options map[string]any) Answer {
	return c.do(ctx, "POST", base+"/api/v1/configure", map[string]any{"queue": queue, "options": options})
}

// Health is the part of /health the runner reads.
type Health struct {
	Status int    `json:"-"`
	NodeID string `json:"node_id"`
	Raft   struct {
		State     string `json:"state"`
		LeaderID  string `json:"leader_id"`
		Term      uint64 `json:"term"`
		Probation bool   `json:"probation"`
	} `json:"raft"`
}

// Health reads /health; a 503 with a body is an answer.
func (c *Client) Health(ctx context.Context, base string) (Health, error) {
	a := c.do(ctx, "GET", base+"/health", nil)
	var h Health
	if a.Status == 0 {
		return h, errors.New(a.Error)
	}
	h.Status = a.Status
	if err := json.Unmarshal(a.Body, &h); err != nil {
		return h, fmt.Errorf("health: %w", err)
	}
	return h, nil
}

// Digest reads /internal/v1/digest.
func (c *Client) Digest(ctx context.Context, base string) (applied uint64, digest string, err error) {
	a := c.do(ctx, "GET", base+"/internal/v1/digest", nil)
	if a.Outcome != history.OK {
		return 0, "", errors.New(a.Error)
	}
	var d struct {
		AppliedIndex uint64 `json:"applied_index"`
		Digest       string `json:"digest"`
	}
	if err := json.Unmarshal(a.Body, &d); err != nil {
		return 0, "", err
	}
	return d.AppliedIndex, d.Digest, nil
}

// PartitionTotals reads the number of stored messages per partition of
// queue ("partition" -> total); linearizable asks the node to catch up with
// the leader first.
func (c *Client) PartitionTotals(ctx context.Context, base, queue string, linearizable bool) (map[string]int64, error) {
	u := base + "/api/v1/resources/queues/" + url.PathEscape(queue)
	if linearizable {
		u += "?consistency=linearizable"
	}
	a := c.do(ctx, "GET", u, nil)
	if a.Outcome != history.OK {
		return nil, errors.New(a.Error)
	}
	var v struct {
		Partitions []struct {
			Name  string `json:"name"`
			Stats struct {
				Total int64 `json:"total"`
			} `json:"stats"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(a.Body, &v); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, p := range v.Partitions {
		out[p.Name] = p.Stats.Total
	}
	return out, nil
}
