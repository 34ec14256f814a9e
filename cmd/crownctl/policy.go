package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// The policy command group: OJS queue policies (/ojs/v1/queues/_policies
// and the _default policy, docs/queues.md).

func init() { groups = append(groups, policyGroup) }

var policyGroup = &group{
	name:    "policy",
	summary: "administer OJS queue policies (list, get, put, delete; the _default policy included)",
	subs: []subcommand{
		{name: "list", summary: "list the named policies and the _default overrides", maxArgs: 0, run: policyList},
		{name: "get", args: "NAME", summary: "show a policy (NAME _default: the default policy)", minArgs: 1, maxArgs: 1, run: policyGet},
		{name: "put", args: "NAME POLICY_JSON", summary: "create a policy, or merge-patch an existing one",
			help: `POST /ojs/v1/queues/_policies when NAME is new, PATCH otherwise; NAME _default
replaces the default policy's configuration (PUT /ojs/v1/queues/_default/config). E.g.
  crownctl policy put batch '{"match":"batch.*","priority":10,"config":{"capacity":{"max_depth":1000000}}}'
  crownctl policy put _default '{"processing":{"visibility_timeout":120}}'`,
			minArgs: 2, maxArgs: 2, run: policyPut},
		{name: "delete", args: "NAME", summary: "delete a policy (its queues are unbound)", minArgs: 1, maxArgs: 1, run: policyDelete},
	},
}

type ojsPolicy struct {
	Name     string                    `json:"name"`
	Match    string                    `json:"match"`
	Priority int64                     `json:"priority"`
	Config   map[string]map[string]any `json:"config"`
}

func policyPath(name string) string { return "/ojs/v1/queues/_policies/" + url.PathEscape(name) }

func configText(c map[string]map[string]any) string {
	b, _ := json.Marshal(c)
	return string(b)
}

func policyList(ctx context.Context, e *env, _ []string) error {
	raws, err := readPages(ctx, e, "/ojs/v1/queues/_policies", "policies")
	if err != nil {
		return err
	}
	all := make([]ojsPolicy, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &all[i]); err != nil {
			return fmt.Errorf("decode policy: %w", err)
		}
	}
	var def struct {
		Overrides map[string]map[string]any `json:"overrides"`
	}
	defRaw, err := e.client.Get(ctx, "/ojs/v1/queues/_default/config", &def)
	if err != nil {
		return err
	}
	if e.json {
		// "policies" keeps the shape of the server's listing, every page's
		// policies in one array.
		if raws == nil {
			raws = []json.RawMessage{}
		}
		b, err := json.Marshal(map[string]any{"policies": map[string]any{"policies": raws}, "default": defRaw})
		if err != nil {
			return err
		}
		return printJSON(e.stdout, b)
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "NAME\tMATCH\tPRIORITY\tCONFIG")
	fmt.Fprintf(tw, "_default\t*\t-\t%s\n", configText(def.Overrides))
	for _, p := range all {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", p.Name, p.Match, p.Priority, configText(p.Config))
	}
	return tw.Flush()
}

func policyGet(ctx context.Context, e *env, a []string) error {
	path := policyPath(a[0])
	if a[0] == "_default" {
		path = "/ojs/v1/queues/_default/config"
	}
	raw, err := e.client.Get(ctx, path, nil)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	if a[0] == "_default" {
		var d struct {
			Config    map[string]map[string]any `json:"config"`
			Overrides map[string]map[string]any `json:"overrides"`
		}
		json.Unmarshal(raw, &d)
		fmt.Fprintf(e.stdout, "effective defaults: %s\noverrides: %s\n", configText(d.Config), configText(d.Overrides))
		return nil
	}
	var ans struct {
		Policy ojsPolicy `json:"policy"`
	}
	json.Unmarshal(raw, &ans)
	tw := newTable(e.stdout)
	fmt.Fprintf(tw, "name:\t%s\nmatch:\t%s\npriority:\t%d\nconfig:\t%s\n", ans.Policy.Name, ans.Policy.Match, ans.Policy.Priority, configText(ans.Policy.Config))
	return tw.Flush()
}

func policyPut(ctx context.Context, e *env, a []string) error {
	m, err := jsonArg(a[1])
	if err != nil {
		return err
	}
	var raw json.RawMessage
	switch {
	case a[0] == "_default":
		raw, err = e.client.Do(ctx, "PUT", "/ojs/v1/queues/_default/config", m)
	default:
		// Only a 404 means the policy is new: any other failure of the
		// lookup (no leader, a timeout) is this command's error, not a
		// reason to create.
		_, gerr := e.client.Get(ctx, policyPath(a[0]), nil)
		var ae *APIError
		switch {
		case gerr == nil:
			raw, err = e.client.Do(ctx, "PATCH", policyPath(a[0]), m)
		case errors.As(gerr, &ae) && ae.Status == http.StatusNotFound:
			m["name"] = a[0]
			raw, err = e.client.Post(ctx, "/ojs/v1/queues/_policies", m, nil)
		default:
			return fmt.Errorf("look up policy %s: %w", a[0], gerr)
		}
	}
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	fmt.Fprintf(e.stdout, "policy %s saved\n", a[0])
	return nil
}

func policyDelete(ctx context.Context, e *env, a []string) error {
	var ans struct {
		Unbound int64 `json:"queues_unbound"`
	}
	raw, err := e.client.Delete(ctx, policyPath(a[0]), &ans)
	if err != nil {
		return err
	}
	if e.json {
		return printJSON(e.stdout, raw)
	}
	fmt.Fprintf(e.stdout, "policy %s deleted; %d queues unbound\n", a[0], ans.Unbound)
	return nil
}
