package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client is a small typed client for the Queen API endpoints tests use. It
// does not retry unless built with Retrying.
type Client struct {
	BaseURL string
	HTTP    *http.Client
	retry   time.Duration
}

// sharedTransport is used by every Client: connections to a killed node
// fail once and are discarded.
var sharedTransport = &http.Transport{
	Proxy:               nil,
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     30 * time.Second,
}

// NewClient returns a client for the node at baseURL (http://host:port).
func NewClient(baseURL string) *Client {
	return &Client{BaseURL: baseURL, HTTP: &http.Client{Transport: sharedTransport}}
}

// Retrying returns a copy of c that retries a request for up to d while it
// fails with a transport error (refused, reset, EOF: the node is down or
// restarting) or a 502/503/504. Only ask for it where a repeated request is
// safe for the test: pushes with transactionIds are deduplicated and acks
// are cumulative, but a retried pop may leave a lease nobody holds.
func (c *Client) Retrying(d time.Duration) *Client {
	cp := *c
	cp.retry = d
	return &cp
}

// HTTPError is a non-2xx answer.
type HTTPError struct {
	Method, URL string
	Status      int
	Code        string // the "code" of Crown's error body
	Message     string // the "error" of the body
	Body        string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Status, e.Body)
}

// Retryable reports whether err is a transport failure or a 502/503/504:
// a failure after which the request's outcome is unknown or nil.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status == 502 || he.Status == 503 || he.Status == 504
	}
	var de *decodeError
	if errors.As(err, &de) {
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// decodeError is a 2xx answer whose body is not the expected JSON.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// Do sends a request with an optional JSON body and decodes a JSON answer
// into out (when out is non-nil and the answer has a body). It returns the
// HTTP status; a status outside 2xx is an *HTTPError.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, err
		}
	}
	var deadline time.Time
	if c.retry > 0 {
		deadline = time.Now().Add(c.retry)
	}
	backoff := 25 * time.Millisecond
	for {
		status, err := c.once(ctx, method, path, payload, out)
		if err == nil || c.retry <= 0 || !Retryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return status, err
		}
		select {
		case <-ctx.Done():
			return status, err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

func (c *Client) once(ctx context.Context, method, path string, payload []byte, out any) (int, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
	}
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	u := c.BaseURL + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read body: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		he := &HTTPError{Method: method, URL: u, Status: resp.StatusCode, Body: string(b)}
		var eb struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(b, &eb) == nil {
			he.Code, he.Message = eb.Code, eb.Error
		}
		return resp.StatusCode, he
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, &decodeError{fmt.Errorf("%s %s: decode %q: %w", method, u, b, err)}
		}
	}
	return resp.StatusCode, nil
}

// ---- push ----

// PushItem is one message to push (queen-api.md 3.5).
type PushItem struct {
	Queue         string `json:"queue"`
	Partition     string `json:"partition,omitempty"`
	Payload       any    `json:"payload"`
	TransactionID string `json:"transactionId,omitempty"`
	TraceID       string `json:"traceId,omitempty"`
}

// PushResult is one entry of a push answer.
type PushResult struct {
	Index         int     `json:"index"`
	Status        string  `json:"status"` // queued or duplicate
	TransactionID string  `json:"transaction_id"`
	MessageID     string  `json:"message_id"`
	PartitionID   string  `json:"partition_id"`
	TraceID       *string `json:"trace_id"`
	QueueName     string  `json:"queueName"`
	Error         string  `json:"error"`
}

// Push sends items in one request and returns the per-item results (201).
func (c *Client) Push(ctx context.Context, items []PushItem) ([]PushResult, error) {
	var out []PushResult
	status, err := c.Do(ctx, "POST", "/api/v1/push", map[string]any{"items": items}, &out)
	if err != nil {
		return nil, err
	}
	if status != http.StatusCreated {
		return out, fmt.Errorf("push answered %d, want 201", status)
	}
	if len(out) != len(items) {
		return out, fmt.Errorf("push answered %d results for %d items", len(out), len(items))
	}
	return out, nil
}

// ---- pop ----

// PopParams are the pop query parameters (queen-api.md 3.6). Zero values
// are not sent.
type PopParams struct {
	Partition        string // non-empty: the specific form
	ConsumerGroup    string
	Batch            int
	Wait             bool
	Timeout          time.Duration // long-poll deadline, sent in ms
	AutoAck          bool
	SubscriptionMode string
	SubscriptionFrom string
	Partitions       int
	LeaseSeconds     int
}

// Message is one popped message (queen-api.md 4.18).
type Message struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	LeaseID       string          `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
	Data          json.RawMessage `json:"data"`
	TraceID       *string         `json:"traceId"`
	CreatedAt     string          `json:"createdAt"`
	RetryCount    int             `json:"retryCount"`
}

// Pop pops from queue; a 204 returns no messages and no error.
func (c *Client) Pop(ctx context.Context, queue string, p PopParams) ([]Message, error) {
	path := "/api/v1/pop/queue/" + url.PathEscape(queue)
	if p.Partition != "" {
		path += "/partition/" + url.PathEscape(p.Partition)
	}
	q := url.Values{}
	if p.ConsumerGroup != "" {
		q.Set("consumerGroup", p.ConsumerGroup)
	}
	if p.Batch > 0 {
		q.Set("batch", strconv.Itoa(p.Batch))
	}
	if p.Wait {
		q.Set("wait", "true")
	}
	if p.Timeout > 0 {
		q.Set("timeout", strconv.FormatInt(p.Timeout.Milliseconds(), 10))
	}
	if p.AutoAck {
		q.Set("autoAck", "true")
	}
	if p.SubscriptionMode != "" {
		q.Set("subscriptionMode", p.SubscriptionMode)
	}
	if p.SubscriptionFrom != "" {
		q.Set("subscriptionFrom", p.SubscriptionFrom)
	}
	if p.Partitions > 0 {
		q.Set("partitions", strconv.Itoa(p.Partitions))
	}
	if p.LeaseSeconds > 0 {
		q.Set("leaseSeconds", strconv.Itoa(p.LeaseSeconds))
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if p.Wait && p.Timeout > 0 {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, p.Timeout+30*time.Second)
			defer cancel()
		}
	}
	var out struct {
		Messages []Message `json:"messages"`
	}
	status, err := c.Do(ctx, "GET", path, nil, &out)
	if err != nil {
		return nil, err
	}
	if status == http.StatusNoContent {
		return nil, nil
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("pop answered %d", status)
	}
	return out.Messages, nil
}

// ---- ack ----

// Ack is one acknowledgment (queen-api.md 3.7); Status defaults to completed.
type Ack struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId,omitempty"`
	Status        string `json:"status,omitempty"`
	Error         string `json:"error,omitempty"`
}

// AckFor acknowledges a popped message with status (completed when empty).
func AckFor(m Message, status string) Ack {
	return Ack{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID, Status: status}
}

// AckResult is one entry of an ack answer.
type AckResult struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     *string `json:"queueName"`
	PartitionName *string `json:"partitionName"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
	Dropped       bool    `json:"dropped"`
}

// AckBatch posts acks to /api/v1/ack/batch for group ("" is queue mode)
// and returns the per-item results.
func (c *Client) AckBatch(ctx context.Context, group string, acks []Ack) ([]AckResult, error) {
	body := map[string]any{"acknowledgments": acks}
	if group != "" {
		body["consumerGroup"] = group
	}
	var out []AckResult
	if _, err := c.Do(ctx, "POST", "/api/v1/ack/batch", body, &out); err != nil {
		return nil, err
	}
	if len(out) != len(acks) {
		return out, fmt.Errorf("ack/batch answered %d results for %d acks", len(out), len(acks))
	}
	return out, nil
}

// ---- configure ----

// Configure replaces a queue's options (queen-api.md 3.4).
func (c *Client) Configure(ctx context.Context, queue string, options map[string]any) error {
	body := map[string]any{"queue": queue}
	if options != nil {
		body["options"] = options
	}
	_, err := c.Do(ctx, "POST", "/api/v1/configure", body, nil)
	return err
}

// ---- cluster and internal endpoints ----

// Health is a /health answer (200 or 503); HTTPStatus holds the status.
type Health struct {
	HTTPStatus int    `json:"-"`
	Status     string `json:"status"`
	NodeID     string `json:"node_id"`
	Raft       struct {
		State        string `json:"state"`
		LeaderID     string `json:"leader_id"`
		LeaderHTTP   string `json:"leader_http"`
		Term         uint64 `json:"term"`
		AppliedIndex uint64 `json:"applied_index"`
		CommitIndex  uint64 `json:"commit_index"`
		LastIndex    uint64 `json:"last_index"`
	} `json:"raft"`
}

// Health reads /health; a 503 is an answer, not an error.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	status, err := c.Do(ctx, "GET", "/health", nil, &h)
	var he *HTTPError
	if errors.As(err, &he) && he.Status == http.StatusServiceUnavailable {
		if jerr := json.Unmarshal([]byte(he.Body), &h); jerr != nil {
			return h, err
		}
		status, err = he.Status, nil
	}
	h.HTTPStatus = status
	return h, err
}

// Digest is a /internal/v1/digest answer.
type Digest struct {
	NodeID       string `json:"node_id"`
	AppliedIndex uint64 `json:"applied_index"`
	Digest       string `json:"digest"`
}

// Digest reads the node's state digest.
func (c *Client) Digest(ctx context.Context) (Digest, error) {
	var d Digest
	_, err := c.Do(ctx, "GET", "/internal/v1/digest", nil, &d)
	return d, err
}

// Member is one entry of /api/v1/cluster/members.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// Members lists the Raft configuration as the node sees it.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	var out struct {
		Members []Member `json:"members"`
	}
	_, err := c.Do(ctx, "GET", "/api/v1/cluster/members", nil, &out)
	return out.Members, err
}
