package testcluster

import (
	"context"
	"net/url"
)

// ---- resources ----

// QueueStats are the message counts of /api/v1/resources/queues/{queue}
// (a queue's "totals" or a partition's "stats").
type QueueStats struct {
	Total      uint64 `json:"total"`
	Pending    uint64 `json:"pending"`
	Processing uint64 `json:"processing"`
	Completed  uint64 `json:"completed"`
	DeadLetter uint64 `json:"deadLetter"`
}

// QueueInfo is a /api/v1/resources/queues/{queue} answer.
type QueueInfo struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Partitions []struct {
		ID    string     `json:"id"`
		Name  string     `json:"name"`
		Stats QueueStats `json:"stats"`
	} `json:"partitions"`
	Totals QueueStats `json:"totals"`
}

// Queue reads GET /api/v1/resources/queues/{queue}; linearizable adds
// ?consistency=linearizable (the node first catches up with the leader's
// commit index). An unknown queue is an *HTTPError with status 404.
func (c *Client) Queue(ctx context.Context, queue string, linearizable bool) (QueueInfo, error) {
	path := "/api/v1/resources/queues/" + url.PathEscape(queue)
	if linearizable {
		path += "?consistency=linearizable"
	}
	var out QueueInfo
	_, err := c.Do(ctx, "GET", path, nil, &out)
	return out, err
}

// ---- membership ----

// AddMember posts /api/v1/cluster/members: add (or re-address) a voter.
func (c *Client) AddMember(ctx context.Context, id, raftAddr, httpAddr string) error {
	_, err := c.Do(ctx, "POST", "/api/v1/cluster/members",
		map[string]string{"id": id, "raft_addr": raftAddr, "http_addr": httpAddr}, nil)
	return err
}

// RemoveMember sends DELETE /api/v1/cluster/members/{id}: remove a member
// from the Raft configuration and the node registry.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	_, err := c.Do(ctx, "DELETE", "/api/v1/cluster/members/"+url.PathEscape(id), nil, nil)
	return err
}
