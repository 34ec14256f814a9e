package fsm

import "github.com/crownmq/crown/segments"

// ojsCommand is a random OJS administration command for the determinism
// log: policies, state changes, capacity and access limits, purges,
// deletions with every strategy and OJS sweeps, over the generator's queues.
func (g *generator) ojsCommand() Command {
	q := genQueues[g.pick(len(genQueues))]
	if q == "" {
		q = "other"
	}
	cfg := QueueConfig{}
	switch g.pick(4) {
	case 0:
		cfg.MaxDepth = i64(int64(1 + g.pick(20)))
	case 1:
		cfg.MaxConcurrency = i64(int64(1 + g.pick(2)))
	case 2:
		l := []string{"svc-a"}
		cfg.Producers = &l
	default:
		cfg.VisibilityTimeout = i64(int64(1 + g.pick(100)))
		cfg.DLQMaxCount = i64(int64(1 + g.pick(3)))
	}
	switch g.pick(9) {
	case 0:
		return &OJSPutPolicy{Name: []string{"p1", "p2", DefaultPolicyName}[g.pick(3)], Mode: []uint8{PolicyCreate, PolicyPatch, PolicyPut}[g.pick(3)],
			Match: []string{"orders.*", "*", "st?ck"}[g.pick(3)], HasMatch: true, Priority: int64(g.pick(3)), HasPriority: true, Set: cfg}
	case 1:
		return &OJSDeletePolicy{Name: []string{"p1", "p2"}[g.pick(2)]}
	case 2:
		return &OJSCreateQueue{Name: q, Bind: BindAuto, Config: cfg}
	case 3:
		return &OJSUpdateQueue{Name: q, Set: cfg, Unset: uint32(g.pick(FieldsAll + 1)), State: uint8(g.pick(4))}
	case 4:
		return &OJSSetState{Name: q, Pause: g.pick(2) == 0}
	case 5:
		return &OJSPurgeQueue{Name: q, States: uint8(1 + g.pick(7))}
	case 6:
		return &OJSDeleteQueue{Name: q, Strategy: uint8(1 + g.pick(4)), Target: "moved.here"}
	case 7:
		return &PushAs{Principal: []string{"svc-a", "svc-b"}[g.pick(2)], Items: g.pushItems()}
	default:
		return &OJSSweep{Queue: q, MaxDLQ: uint32(1 + g.pick(3))}
	}
}

var _ = segments.DeleteMove
