package main

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
	"strings"
	"time"
)

// maxAnswer bounds how much of an answer crownctl reads (bench pops may
// read more: their bound grows with the pop batch, answerLimit in bench.go).
const maxAnswer = 64 << 20

// Client calls Crown's HTTP API on one of several nodes.
type Client struct {
	// URLs are tried in order until one answers: a node that cannot be
	// reached is skipped, any HTTP answer (an error status too) is final.
	URLs []string
	HTTP *http.Client
}

// APIError is a request-level error answered by a node: the JSON body
// {"error": ..., "code": ..., "field": ...} and the HTTP status.
type APIError struct {
	Status  int
	Code    string
	Type    string // the OJS error's type, a finer code (queue_protected)
	Field   string
	Message string
	URL     string // the node that answered
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if b.Len() == 0 {
		b.WriteString(http.StatusText(e.Status))
	}
	var details []string
	if e.Code != "" {
		details = append(details, e.Code)
	}
	if e.Type != "" && e.Type != e.Code {
		details = append(details, e.Type)
	}
	if e.Field != "" {
		details = append(details, "field "+e.Field)
	}
	details = append(details, fmt.Sprintf("HTTP %d", e.Status))
	fmt.Fprintf(&b, " (%s)", strings.Join(details, ", "))
	return b.String()
}

// NewClient parses a comma-separated list of node URLs. A URL without a
// scheme gets http://.
func NewClient(list string, timeout time.Duration) (*Client, error) {
	var urls []string
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("--url %q: %w", raw, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--url %q: want http://host:port", raw)
		}
		urls = append(urls, strings.TrimRight(raw, "/"))
	}
	if len(urls) == 0 {
		return nil, errors.New("--url is empty")
	}
	return &Client{URLs: urls, HTTP: &http.Client{Timeout: timeout}}, nil
}

// Do sends a request with an optional JSON body to the first node that
// answers and returns the 2xx answer's body, or an *APIError for any other
// status. Unreachable nodes are skipped; for a non-GET request only when
// the connection could not be made, so a write is never sent twice.
func (c *Client) Do(ctx context.Context, method, path string, in any) (json.RawMessage, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, err
		}
	}
	var failures []string
	for _, base := range c.URLs {
		raw, next, err := c.try(ctx, method, base+path, body)
		if !next {
			return raw, err
		}
		failures = append(failures, err.Error())
	}
	if len(failures) == 1 {
		return nil, fmt.Errorf("no answer: %s", failures[0])
	}
	return nil, fmt.Errorf("no node answered:\n  %s", strings.Join(failures, "\n  "))
}

// try makes one attempt; next is true when the next URL should be tried.
func (c *Client) try(ctx context.Context, method, u string, body []byte) (raw json.RawMessage, next bool, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, err
		}
		return nil, retryable(method, err), err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: read answer: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, false, decodeError(resp.StatusCode, u, b)
	}
	if !json.Valid(b) {
		return nil, false, fmt.Errorf("%s %s: answer is not JSON: %.200q", method, u, b)
	}
	return b, false, nil
}

// retryable reports whether a failed request may be sent to the next node:
// reads always, writes only when no connection was made.
func retryable(method string, err error) bool {
	return method == http.MethodGet || method == http.MethodHead || isDialError(err)
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// decodeError reads either error format Crown answers with: the Queen
// API's {"error": "...", "code": ..., "field": ...} and the OJS API's
// {"error": {"code": ..., "message": ..., "details": {"field": ...}}}.
func decodeError(status int, u string, body []byte) error {
	var e struct {
		Error json.RawMessage `json:"error"`
		Code  string          `json:"code"`
		Field string          `json:"field"`
	}
	if json.Unmarshal(body, &e) == nil {
		var queen string
		var ojs struct {
			Code    string `json:"code"`
			Type    string `json:"type"`
			Message string `json:"message"`
			Details struct {
				Field string `json:"field"`
			} `json:"details"`
		}
		switch {
		case json.Unmarshal(e.Error, &queen) == nil && (queen != "" || e.Code != ""):
			return &APIError{Status: status, Code: e.Code, Field: e.Field, Message: queen, URL: u}
		case json.Unmarshal(e.Error, &ojs) == nil && (ojs.Code != "" || ojs.Message != ""):
			return &APIError{Status: status, Code: ojs.Code, Type: ojs.Type, Field: ojs.Details.Field, Message: ojs.Message, URL: u}
		case len(e.Error) == 0 && e.Code != "":
			return &APIError{Status: status, Code: e.Code, Field: e.Field, URL: u}
		}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	return &APIError{Status: status, Message: msg, URL: u}
}

// Get decodes the answer to a GET into out and also returns it raw.
func (c *Client) Get(ctx context.Context, path string, out any) (json.RawMessage, error) {
	return c.call(ctx, http.MethodGet, path, nil, out)
}

// Post sends in as JSON and decodes the answer into out.
func (c *Client) Post(ctx context.Context, path string, in, out any) (json.RawMessage, error) {
	return c.call(ctx, http.MethodPost, path, in, out)
}

// Delete sends a DELETE and decodes the answer into out.
func (c *Client) Delete(ctx context.Context, path string, out any) (json.RawMessage, error) {
	return c.call(ctx, http.MethodDelete, path, nil, out)
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) (json.RawMessage, error) {
	raw, err := c.Do(ctx, method, path, in)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("decode answer to %s %s: %w", method, path, err)
		}
	}
	return raw, nil
}
