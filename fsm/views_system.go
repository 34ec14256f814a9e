package fsm

import (
	"fmt"

	"github.com/crownmq/crown/segments"
)

// SystemSwitches reads the maintenance switches and the push buffer.
func (f *FSM) SystemSwitches() (SystemSwitches, error) {
	var sw SystemSwitches
	err := f.View(func(tx *segments.Tx) (err error) {
		sw, err = readSwitches(tx)
		return err
	})
	if err != nil {
		return SystemSwitches{}, fmt.Errorf("read maintenance switches: %w", err)
	}
	return sw, nil
}

// PopMaintenance reports whether pop maintenance is on in the local state.
func (f *FSM) PopMaintenance() (bool, error) {
	var on bool
	err := f.View(func(tx *segments.Tx) error {
		s, err := loadSetting(tx, settingPopMaintenance)
		on = s.On
		return err
	})
	if err != nil {
		return false, fmt.Errorf("read pop maintenance switch: %w", err)
	}
	return on, nil
}

// SharedState is the replicated state's summary for
// GET /api/v1/system/shared-state.
type SharedState struct {
	Applied     uint64
	Switches    SystemSwitches
	Queues      int
	Nodes       []NodeInfo
	TraceEvents uint64
	TraceBytes  uint64
}

// SharedState summarises the cluster-wide state this node holds.
func (f *FSM) SharedState() (*SharedState, error) {
	st := &SharedState{}
	err := f.View(func(tx *segments.Tx) (err error) {
		st.Applied = tx.Applied()
		if st.Switches, err = readSwitches(tx); err != nil {
			return err
		}
		if err := tx.ForEachQueue(func(*segments.Queue) (bool, error) { st.Queues++; return true, nil }); err != nil {
			return err
		}
		if st.Nodes, err = tx.Nodes(); err != nil {
			return err
		}
		st.TraceEvents, st.TraceBytes = tx.TraceTotals()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read shared state: %w", err)
	}
	return st, nil
}
