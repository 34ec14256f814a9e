package fsm

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// OJS queue administration commands (docs/queues.md). Each is applied by
// one function in ojs_apply.go.

// Presence bits of ConfigureSet: which shared options the /configure
// request named explicitly (they become overrides of the OJS view).
const (
	PresentLease     uint32 = 1 << iota // leaseTime
	PresentDLQ                          // deadLetterQueue or dlqAfterMaxRetries
	PresentRetention                    // retentionEnabled or completedRetentionSeconds
)

// presentShared are the Present bits of the options the OJS view shares.
const presentShared = PresentLease | PresentDLQ | PresentRetention

// ConfigureSet is a Queen /configure that also says which shared options
// the request named. It replaces the Queen base of the queue and the
// overrides of the shared fields; a queue it creates binds the matching
// policy (implicit creation).
type ConfigureSet struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Configure Configure
	Present   uint32
}

// PushAs is a push by a principal (X-OJS-Client-Id or the authenticated
// identity), checked against the queues' access.producers lists.
type PushAs struct {
	Principal string
	Items     []PushItem
}

// LeaseAs is a pop by a principal, checked against access.consumers.
type LeaseAs struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Lease     Lease
	Principal string
}

// TransactionAs is a transaction by a principal: its pushes are checked
// against the queues' access.producers lists, as PushAs.
type TransactionAs struct {
	_msgpack    struct{} `msgpack:",as_array"`
	Transaction Transaction
	Principal   string
}

// Policy binding modes.
const (
	BindAuto  uint8 = 0 // by pattern (create), or unchanged (update)
	BindNone  uint8 = 1 // no policy
	BindNamed uint8 = 2 // the policy named in Policy
)

// OJSCreateQueue creates a queue explicitly (POST /ojs/v1/queues).
type OJSCreateQueue struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Name      string
	Paused    bool
	Bind      uint8
	Policy    string
	Config    QueueConfig
	MaxQueues uint32
}

// Target states of OJSUpdateQueue (0: unchanged).
const (
	ToActive   uint8 = 1
	ToPaused   uint8 = 2
	ToDraining uint8 = 3
)

// OJSUpdateQueue applies a merge patch (or, with Replace, a full
// replacement) to a queue's overrides, and optionally its state and policy
// binding (PATCH /ojs/v1/queues/{name}, PUT .../config).
type OJSUpdateQueue struct {
	_msgpack struct{} `msgpack:",as_array"`
	Name     string
	Replace  bool
	Set      QueueConfig
	Unset    uint32
	State    uint8
	Bind     uint8 // BindAuto: unchanged
	Policy   string
}

// MaxPauseReason bounds the reason of a pause or resume, in characters
// (ojs-queues.md 6.6).
const MaxPauseReason = 256

// OJSSetState pauses or resumes a queue, creating an unknown one implicitly.
type OJSSetState struct {
	_msgpack struct{} `msgpack:",as_array"`
	Name     string
	Pause    bool
	Reason   string
	Strict   bool // --ojs-strict-queues: no implicit creation
	// EnsureOnly creates the queue (active) when it does not exist and
	// otherwise changes nothing: the leader uses it to make sure the OJS
	// queue "default" exists without undoing an operator's pause.
	EnsureOnly bool
	// MaxQueues bounds an implicit creation as OJSCreateQueue's does (0: no
	// bound). Last, so older entries still decode.
	MaxQueues uint32
}

// OJSDeleteQueue deletes a queue with a strategy.
type OJSDeleteQueue struct {
	_msgpack struct{} `msgpack:",as_array"`
	Name     string
	Strategy uint8
	Target   string
	// Strict (--ojs-strict-queues): a move to an unknown target is refused
	// (404) instead of creating it. MaxQueues bounds a move's creation of
	// its target (0: no bound). Appended, so older entries still decode.
	Strict    bool
	MaxQueues uint32
}

// Purge selections.
const (
	PurgeBacklog   uint8 = 1 << iota // available, scheduled, retryable, pending
	PurgeCompleted                   // consumed messages still stored
	PurgeDiscarded                   // the queue's dead letters
)

// OJSPurgeQueue removes messages and keeps the queue.
type OJSPurgeQueue struct {
	_msgpack struct{} `msgpack:",as_array"`
	Name     string
	States   uint8
}

// Policy write modes.
const (
	PolicyCreate uint8 = 1 // POST _policies: must not exist
	PolicyPatch  uint8 = 2 // PATCH _policies/{name} or _default/config
	PolicyPut    uint8 = 3 // PUT _default/config: replace the config
)

// OJSPutPolicy creates or changes a named policy or the _default policy and
// re-resolves every queue it reaches.
type OJSPutPolicy struct {
	_msgpack    struct{} `msgpack:",as_array"`
	Name        string
	Mode        uint8
	Match       string
	HasMatch    bool
	Priority    int64
	HasPriority bool
	Set         QueueConfig
	Unset       uint32
}

// OJSDeletePolicy removes a named policy and unbinds its queues.
type OJSDeletePolicy struct {
	_msgpack struct{} `msgpack:",as_array"`
	Name     string
}

// OJSSweep is the leader's OJS maintenance for one queue: finish a deletion
// whose last lease ended or a graceful drain that reached depth 0, then
// prune the dead letters by max_age then max_count, at most MaxDLQ of them.
type OJSSweep struct {
	_msgpack struct{} `msgpack:",as_array"`
	Queue    string
	MaxDLQ   uint32
}

const (
	TypeConfigureSet    Type = 12
	TypePushAs          Type = 13
	TypeLeaseAs         Type = 14
	TypeOJSCreateQueue  Type = 15
	TypeOJSUpdateQueue  Type = 16
	TypeOJSSetState     Type = 17
	TypeOJSDeleteQueue  Type = 18
	TypeOJSPurgeQueue   Type = 19
	TypeOJSPutPolicy    Type = 20
	TypeOJSDeletePolicy Type = 21
	TypeOJSSweep        Type = 22
	TypeTransactionAs   Type = 23
)

func (*ConfigureSet) Type() Type    { return TypeConfigureSet }
func (*PushAs) Type() Type          { return TypePushAs }
func (*LeaseAs) Type() Type         { return TypeLeaseAs }
func (*OJSCreateQueue) Type() Type  { return TypeOJSCreateQueue }
func (*OJSUpdateQueue) Type() Type  { return TypeOJSUpdateQueue }
func (*OJSSetState) Type() Type     { return TypeOJSSetState }
func (*OJSDeleteQueue) Type() Type  { return TypeOJSDeleteQueue }
func (*OJSPurgeQueue) Type() Type   { return TypeOJSPurgeQueue }
func (*OJSPutPolicy) Type() Type    { return TypeOJSPutPolicy }
func (*OJSDeletePolicy) Type() Type { return TypeOJSDeletePolicy }
func (*OJSSweep) Type() Type        { return TypeOJSSweep }
func (*TransactionAs) Type() Type   { return TypeTransactionAs }

// ---- validation ----

func checkOJSName(field, name string) error {
	if !ValidQueueName(name) {
		return fmt.Errorf("%s %q is not a valid OJS queue name", field, name)
	}
	return nil
}

func checkConfig(c *QueueConfig) error {
	if errs := CheckConfig(c); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// Validate checks the command's limits.
func (c *ConfigureSet) Validate() error { return c.Configure.Validate() }

// Validate checks the command's limits.
func (c *PushAs) Validate() error {
	if len(c.Principal) > MaxNameBytes {
		return &NameError{Field: "principal", Len: len(c.Principal)}
	}
	return checkItems(c.Items)
}

// Validate checks the command's limits.
func (c *TransactionAs) Validate() error {
	if len(c.Principal) > MaxNameBytes {
		return &NameError{Field: "principal", Len: len(c.Principal)}
	}
	return c.Transaction.Validate()
}

// Validate checks the command's limits.
func (c *LeaseAs) Validate() error { return validateLeaseBy(&c.Lease, c.Principal) }

// validateLeaseBy checks a pop by principal (LeaseAs, LeaseCapped).
func validateLeaseBy(l *Lease, principal string) error {
	if len(principal) > MaxNameBytes {
		return &NameError{Field: "principal", Len: len(principal)}
	}
	return l.Validate()
}

// Validate checks the command's limits.
func (c *OJSCreateQueue) Validate() error {
	if err := checkOJSName("queue", c.Name); err != nil {
		return err
	}
	if c.Bind == BindNamed && (c.Policy == "" || len(c.Policy) > MaxPolicyNameBytes) {
		return fmt.Errorf("policy name %q", c.Policy)
	}
	return checkConfig(&c.Config)
}

// Validate checks the command's limits.
func (c *OJSUpdateQueue) Validate() error {
	if err := checkOJSName("queue", c.Name); err != nil {
		return err
	}
	if c.State > ToDraining || c.Bind > BindNamed || c.Unset > FieldsAll {
		return errors.New("queue update out of range")
	}
	return checkConfig(&c.Set)
}

// Validate checks the command's limits.
func (c *OJSSetState) Validate() error {
	if utf8.RuneCountInString(c.Reason) > MaxPauseReason {
		return fmt.Errorf("reason over %d characters", MaxPauseReason)
	}
	return checkOJSName("queue", c.Name)
}

// Validate checks the command's limits.
func (c *OJSDeleteQueue) Validate() error {
	if c.Strategy < 1 || c.Strategy > 4 {
		return fmt.Errorf("delete strategy %d unknown", c.Strategy)
	}
	if c.Strategy == 3 {
		if err := checkOJSName("target_queue", c.Target); err != nil {
			return err
		}
	}
	return checkOJSName("queue", c.Name)
}

// Validate checks the command's limits.
func (c *OJSPurgeQueue) Validate() error {
	if c.States == 0 || c.States > 7 {
		return errors.New("purge selects nothing")
	}
	return checkOJSName("queue", c.Name)
}

// Validate checks the command's limits.
func (c *OJSPutPolicy) Validate() error {
	if c.Name != DefaultPolicyName {
		if len(c.Name) > MaxPolicyNameBytes || !ValidQueueName(c.Name) {
			return fmt.Errorf("policy name %q is not valid", c.Name)
		}
		if c.Mode == PolicyCreate && !c.HasMatch {
			return errors.New("a policy needs a match pattern")
		}
		if c.HasMatch && !ValidPattern(c.Match) {
			return fmt.Errorf("match pattern %q is not valid", c.Match)
		}
	}
	if c.Mode < PolicyCreate || c.Mode > PolicyPut || c.Unset > FieldsAll {
		return errors.New("policy write out of range")
	}
	if c.HasPriority && (c.Priority < -MaxPolicyPriority || c.Priority > MaxPolicyPriority) {
		return fmt.Errorf("priority %d out of range", c.Priority)
	}
	return checkConfig(&c.Set)
}

// Validate checks the command's limits.
func (c *OJSDeletePolicy) Validate() error {
	if c.Name == "" || len(c.Name) > MaxPolicyNameBytes {
		return fmt.Errorf("policy name %q", c.Name)
	}
	return nil
}

// Validate checks the command's limits.
func (c *OJSSweep) Validate() error {
	if c.MaxDLQ == 0 {
		return errors.New("OJS sweep with a zero budget")
	}
	return checkNames("queue", c.Queue)
}

// ---- PushAs codec: [principal, [items…]], read without copying payloads ----

// encodedSizeHint bounds the body EncodeMsgpack writes (FrameCommand).
func (c *PushAs) encodedSizeHint() int { return 1 + 5 + len(c.Principal) + itemsSizeHint(c.Items) }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c *PushAs) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := errors.Join(enc.EncodeArrayLen(2), enc.EncodeString(c.Principal)); err != nil {
		return err
	}
	return encodeItems(enc, c.Items)
}

func (c *PushAs) decodeFrom(r *mpReader) error {
	if n, err := r.arrayLen(); err != nil || n != 2 {
		return r.fail("push_as")
	}
	var err error
	if c.Principal, err = r.str(); err != nil {
		return err
	}
	c.Items, err = decodeItems(r)
	return err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *PushAs) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, c.decodeFrom) }

// ---- OJSDeleteQueue codec: [name, strategy, target], then strict and
// max_queues as they were appended. msgpack's reflective decoder refuses an
// array-encoded struct whose length differs from the fields', so this one
// reads every length: entries written before an appended field still decode.

func (c *OJSDeleteQueue) decodeFrom(r *mpReader) error {
	n, err := r.arrayLen()
	if err != nil || n < 3 || n > 5 {
		return r.fail("ojs_delete_queue")
	}
	*c = OJSDeleteQueue{}
	if c.Name, err = r.str(); err != nil {
		return err
	}
	s, err := r.uint()
	if err != nil || s > 255 {
		return r.fail("ojs_delete_queue strategy")
	}
	c.Strategy = uint8(s)
	if c.Target, err = r.str(); err != nil {
		return err
	}
	if n >= 4 {
		if c.Strict, err = r.bool(); err != nil {
			return err
		}
	}
	if n == 5 {
		if c.MaxQueues, err = r.uint32(); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *OJSDeleteQueue) DecodeMsgpack(dec *msgpack.Decoder) error {
	return decodeVia(dec, c.decodeFrom)
}

// ---- OJSSetState codec: [name, pause, reason, strict, ensure_only] and,
// since MaxQueues was appended, [..., max_queues]; both lengths decode.

func (c *OJSSetState) decodeFrom(r *mpReader) error {
	n, err := r.arrayLen()
	if err != nil || (n != 5 && n != 6) {
		return r.fail("ojs_set_state")
	}
	*c = OJSSetState{}
	if c.Name, err = r.str(); err != nil {
		return err
	}
	if c.Pause, err = r.bool(); err != nil {
		return err
	}
	if c.Reason, err = r.str(); err != nil {
		return err
	}
	if c.Strict, err = r.bool(); err != nil {
		return err
	}
	if c.EnsureOnly, err = r.bool(); err != nil {
		return err
	}
	if n == 6 {
		if c.MaxQueues, err = r.uint32(); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *OJSSetState) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeVia(dec, c.decodeFrom) }
