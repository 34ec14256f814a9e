package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
)

// The queue command group: the OJS queue administration API
// (/ojs/v1/queues, docs/queues.md).

func init() { groups = append(groups, queueGroup) }

var queueGroup = &group{
	name:    "queue",
	summary: "administer queues through the OJS API (list, get, create, patch, pause, resume, purge, delete, stats)",
	subs: []subcommand{
		{name: "list", summary: "list queues with state, depth and policy", maxArgs: 0, run: queueList,
			help: "GET /ojs/v1/queues (every page). Names outside the OJS alphabet are marked with *."},
		{name: "get", args: "NAME", summary: "show one queue: state, effective configuration, overrides, counts",
			minArgs: 1, maxArgs: 1, run: queueGet},
		{name: "create", args: "NAME [CONFIG_JSON]", summary: "create a queue, optionally with a configuration document",
			help: `POST /ojs/v1/queues. CONFIG_JSON holds the sections, e.g.
  crownctl queue create payments '{"capacity":{"max_depth":100000},"processing":{"visibility_timeout":1800}}'
It may also carry "state" ("paused") and "policy" (a name or null).`,
			minArgs: 1, maxArgs: 2, run: queueCreate},
		{name: "patch", args: "NAME PATCH_JSON", summary: "merge-patch a queue's overrides, state or policy (null removes an override)",
			help: `PATCH /ojs/v1/queues/NAME, e.g.
  crownctl queue patch payments '{"capacity":{"max_depth":null},"state":"draining"}'`,
			minArgs: 2, maxArgs: 2, run: queuePatch},
		{name: "pause", args: "NAME", summary: "pause delivery (pushes are still accepted)", minArgs: 1, maxArgs: 1,
			run: func(ctx context.Context, e *env, a []string) error { return queueAction(ctx, e, a[0], "pause", nil) }},
		{name: "resume", args: "NAME", summary: "resume delivery", minArgs: 1, maxArgs: 1,
			run: func(ctx context.Context, e *env, a []string) error { return queueAction(ctx, e, a[0], "resume", nil) }},
		{name: "purge", args: "NAME", summary: "remove the unconsumed messages (asks for --yes)", minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet) any {
				fs.Bool("yes", false, "confirm the purge")
				fs.String("states", "", "comma-separated states (default available,scheduled,retryable,pending)")
				return nil
			},
			run: queuePurge},
		{name: "delete", args: "NAME", summary: "delete a queue with a strategy (reject, purge, move, discard)", minArgs: 1, maxArgs: 1,
			flags: func(fs *flag.FlagSet) any {
				fs.String("strategy", "reject", "reject, purge, move or discard")
				fs.String("target", "", "target queue for --strategy move")
				return nil
			},
			run: queueDelete},
		{name: "stats", args: "NAME", summary: "depth, capacity and pressure", minArgs: 1, maxArgs: 1, run: queueStats},
	},
}

// flagValue reads a subcommand flag by name (flags are registered in the group table).
func flagValue(ctx context.Context, name string) string {
	if fs, ok := ctx.Value(flagSetKey{}).(*flag.FlagSet); ok {
		if f := fs.Lookup(name); f != nil {
			return f.Value.String()
		}
	}
	return ""
}

type flagSetKey struct{}

type ojsQueue struct {
	Name      string                            `json:"name"`
	State     string                            `json:"state"`
	Origin    string                            `json:"origin"`
	Policy    *string                           `json:"policy"`
	Depth     int64                             `json:"depth"`
	Available int64                             `json:"available"`
	Active    int64                             `json:"active"`
	Completed int64                             `json:"completed"`
	DLQ       int64                             `json:"dead_lettered"`
	Config    map[string]map[string]any         `json:"config"`
	Overrides map[string]map[string]any         `json:"overrides"`
	OJSName   bool                              `json:"ojs_addressable"`
	Deletion  map[string]any                    `json:"deletion"`
	Extra     map[string]map[string]json.Number `json:"-"`
}

func queuePath(name string, rest ...string) string {
	p := "/ojs/v1/queues/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

func queueList(ctx context.Context, e *env, _ []string) error {
	raws, err := readPages(ctx, e, "/ojs/v1/queues", "queues")
	if err != nil {
		return err
	}
	all := make([]ojsQueue, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &all[i]); err != nil {
			return fmt.Errorf("decode queue: %w", err)
		}
	}
	if e.json {
		b, _ := json.Marshal(map[string]any{"queues": raws})
		return printJSON(e.stdout, b)
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "NAME\tSTATE\tORIGIN\tPOLICY\tDEPTH\tAVAILABLE\tACTIVE\tDLQ")
	for _, q := range all {
		name := q.Name
		if !q.OJSName {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", name, q.State, q.Origin, strOr(q.Policy, "-"), q.Depth, q.Available, q.Active, q.DLQ)
	}
	return tw.Flush()
}

func strOr(p *string, def string) string {
	if p == nil || *p == "" {
		return def
	}
	return *p
}

func renderQueue(w io.Writer, raw json.RawMessage) error {
	var ans struct {
		Queue ojsQueue `json:"queue"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return err
	}
	q := ans.Queue
	tw := newTable(w)
	fmt.Fprintf(tw, "name:\t%s\n", q.Name)
	fmt.Fprintf(tw, "state:\t%s\n", q.State)
	fmt.Fprintf(tw, "origin:\t%s\n", q.Origin)
	fmt.Fprintf(tw, "policy:\t%s\n", strOr(q.Policy, "-"))
	fmt.Fprintf(tw, "depth:\t%d (available %d, active %d)\n", q.Depth, q.Available, q.Active)
	fmt.Fprintf(tw, "completed, dlq:\t%d, %d\n", q.Completed, q.DLQ)
	if q.Deletion != nil {
		fmt.Fprintf(tw, "deletion:\t%v\n", q.Deletion)
	}
	fmt.Fprintln(tw, "\nFIELD\tEFFECTIVE\tOVERRIDE")
	for _, sec := range []string{"capacity", "processing", "retention", "dead_letter", "access"} {
		keys := make([]string, 0)
		for k := range q.Config[sec] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ov := "-"
			if v, ok := q.Overrides[sec][k]; ok {
				ov = fmt.Sprint(v)
			}
			eff := "null"
			if v := q.Config[sec][k]; v != nil {
				eff = fmt.Sprint(v)
			}
			fmt.Fprintf(tw, "%s.%s\t%s\t%s\n", sec, k, eff, ov)
		}
	}
	return tw.Flush()
}

func showQueue(e *env, raw json.RawMessage) error {
	if e.json {
		return printJSON(e.stdout, raw)
	}
	return renderQueue(e.stdout, raw)
}

func queueGet(ctx context.Context, e *env, a []string) error {
	raw, err := e.client.Get(ctx, queuePath(a[0]), nil)
	if err != nil {
		return err
	}
	return showQueue(e, raw)
}

func jsonArg(s string) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, usagef("not a JSON object: %v", err)
	}
	if m == nil { // null decodes into a nil map without an error
		return nil, usagef("not a JSON object: null")
	}
	return m, nil
}

func queueCreate(ctx context.Context, e *env, a []string) error {
	body := map[string]any{}
	if len(a) == 2 {
		m, err := jsonArg(a[1])
		if err != nil {
			return err
		}
		body = m
	}
	body["name"] = a[0]
	raw, err := e.client.Post(ctx, "/ojs/v1/queues", body, nil)
	if err != nil {
		return err
	}
	return showQueue(e, raw)
}

func queuePatch(ctx context.Context, e *env, a []string) error {
	m, err := jsonArg(a[1])
	if err != nil {
		return err
	}
	raw, err := e.client.Do(ctx, "PATCH", queuePath(a[0]), m)
	if err != nil {
		return err
	}
	return showQueue(e, raw)
}

func queueAction(ctx context.Context, e *env, name, action string, body any) error {
	raw, err := e.client.Post(ctx, queuePath(name, action), body, nil)
	if err != nil {
		return err
	}
	return showQueue(e, raw)
}

func queuePurge(ctx context.Context, e *env, a []string) error {
	if flagValue(ctx, "yes") != "true" {
		return usagef("purge removes messages for good: add --yes")
	}
	body := map[string]any{"confirm": true}
	if s := flagValue(ctx, "states"); s != "" {
		body["states"] = strings.Split(s, ",")
	}
	raw, err := e.client.Post(ctx, queuePath(a[0], "purge"), body, nil)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	var ans struct {
		Purged int64 `json:"purged_count"`
	}
	json.Unmarshal(raw, &ans)
	fmt.Fprintf(e.stdout, "purged %d messages from %s\n", ans.Purged, a[0])
	return nil
}

func queueDelete(ctx context.Context, e *env, a []string) error {
	q := url.Values{}
	q.Set("strategy", flagValue(ctx, "strategy"))
	if t := flagValue(ctx, "target"); t != "" {
		q.Set("target_queue", t)
	}
	raw, err := e.client.Delete(ctx, queuePath(a[0])+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	var ans struct {
		Queue    ojsQueue `json:"queue"`
		Affected int64    `json:"jobs_affected"`
	}
	json.Unmarshal(raw, &ans)
	if ans.Queue.State == "deleted" {
		fmt.Fprintf(e.stdout, "deleted %s (%s, %d messages affected)\n", a[0], flagValue(ctx, "strategy"), ans.Affected)
	} else {
		fmt.Fprintf(e.stdout, "deleting %s (%s): waiting for %d active messages; %d messages affected\n",
			a[0], flagValue(ctx, "strategy"), ans.Queue.Active, ans.Affected)
	}
	return nil
}

func queueStats(ctx context.Context, e *env, a []string) error {
	raw, err := e.client.Get(ctx, queuePath(a[0], "stats"), nil)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	var ans struct {
		Stats map[string]any `json:"stats"`
	}
	json.Unmarshal(raw, &ans)
	tw := newTable(e.stdout)
	for _, k := range []string{"queue", "depth", "max_depth", "size_bytes", "max_size_bytes", "pressure", "oldest_available_at"} {
		v := ans.Stats[k]
		if v == nil {
			v = "-"
		}
		fmt.Fprintf(tw, "%s:\t%v\n", k, v)
	}
	return tw.Flush()
}

// readPages reads every page of an OJS listing at path (the server pages
// it, at most 200 a page) and returns the raw items of each page's member
// array, in order. A cursor that does not move ends the walk rather than
// repeating a page.
func readPages(ctx context.Context, e *env, path, member string) ([]json.RawMessage, error) {
	raws := []json.RawMessage{}
	cursor := ""
	for {
		var page map[string]json.RawMessage
		u := path + "?limit=200"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		if _, err := e.client.Get(ctx, u, &page); err != nil {
			return nil, err
		}
		var items []json.RawMessage
		var pg struct {
			HasMore bool   `json:"has_more"`
			Next    string `json:"next_cursor"`
		}
		if err := json.Unmarshal(page[member], &items); err != nil && page[member] != nil {
			return nil, fmt.Errorf("decode %s page: %w", member, err)
		}
		if err := json.Unmarshal(page["pagination"], &pg); err != nil && page["pagination"] != nil {
			return nil, fmt.Errorf("decode %s pagination: %w", member, err)
		}
		raws = append(raws, items...)
		if !pg.HasMore || pg.Next == "" || pg.Next == cursor {
			return raws, nil
		}
		cursor = pg.Next
	}
}
