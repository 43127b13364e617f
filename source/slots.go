package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cmfs-project/cmfs/api/replpb"
	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
)

// ErrLost is wrapped by a LostError: the destination is behind what the
// source's gc kept, and must be bootstrapped again.
var ErrLost = errors.New("source: events can no longer be reproduced")

// LostError says which event a destination can no longer reproduce.
type LostError struct {
	slot.Lost
	// Position is the destination's last applied event; Slot its slot
	// ("" without one).
	Position uint64
	Slot     string
	// State is the source's state directory.
	State string
}

func (e *LostError) Error() string {
	why := "it follows without a replication slot"
	if e.Slot != "" {
		why = fmt.Sprintf("its slot %q fell behind what gc kept (--retain-max)", e.Slot)
	}
	return fmt.Sprintf("event %d (%s %s) can no longer be reproduced: its content was preserved by event %d as %s and gc has removed it from the source's cmroot (%s)",
		e.Event, e.Type, e.Path, e.RemovedBy, e.CM, why)
}

func (e *LostError) Unwrap() error { return ErrLost }

// slots is the state directory's slot store.
func (s *Server) slots() *slot.Store { return slot.Open(s.cfg.State) }

// present says whether cmroot still holds entry cm.
func (s *Server) present(cm string) bool {
	p, err := cmroot.EntryPath(s.cfg.CMRoot, cm)
	if err != nil {
		return false
	}
	_, err = os.Lstat(p)
	return err == nil
}

func (s *Server) rangeEvents(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	return s.walk(ctx, from, to, false, fn)
}

// Confirm implements replpb.SourceServer.
func (s *Server) Confirm(ctx context.Context, req *replpb.ConfirmRequest) (*replpb.ConfirmResponse, error) {
	store := s.slots()
	var st slot.State
	var err error
	checked := false
	if req.Slot != "" {
		var sl slot.Slot
		sl, st, err = store.Advance(req.Slot, req.Position, time.Now().UTC())
		checked = sl.Checked >= st.Horizon
	} else {
		st, err = store.Load()
	}
	if errors.Is(err, slot.ErrInvalid) {
		err = fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &replpb.ConfirmResponse{Horizon: st.Horizon, State: s.cfg.State}
	if req.Position >= st.Horizon || checked {
		return resp, nil
	}
	lost, err := slot.FirstLost(ctx, s.rangeEvents, req.Position, st.Horizon, s.present)
	if err != nil {
		return nil, toStatus(err)
	}
	if lost == nil {
		if req.Slot != "" {
			if err := store.Checked(req.Slot, req.Position, st.Horizon); err != nil {
				return nil, toStatus(err)
			}
		}
		return resp, nil
	}
	resp.LostEvent, resp.LostType, resp.LostPath, resp.LostCm, resp.RemovedBy =
		lost.Event, string(lost.Type), lost.Path, lost.CM, lost.RemovedBy
	return resp, nil
}

// Slots implements replpb.SourceServer.
func (s *Server) Slots(ctx context.Context, _ *replpb.SlotsRequest) (*replpb.SlotsResponse, error) {
	pins, st, last, err := s.Pins(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &replpb.SlotsResponse{Horizon: st.Horizon, LastEventId: last}
	for _, p := range pins {
		resp.Slots = append(resp.Slots, &replpb.SlotInfo{
			Name: p.Name, Position: p.Position, Lag: p.Lag, Lost: p.Lost,
			PinnedEntries: int64(p.Entries), PinnedBytes: p.Bytes,
			CreatedUnixNano: p.Created.UnixNano(), UpdatedUnixNano: p.Updated.UnixNano(),
		})
	}
	return resp, nil
}

// Pins returns every slot with its lag and what it pins, the slots' state
// and the newest event id.
func (s *Server) Pins(ctx context.Context) ([]slot.Pin, slot.State, uint64, error) {
	st, err := s.slots().Load()
	if err != nil {
		return nil, st, 0, err
	}
	last, _, err := s.last(ctx)
	if err != nil {
		return nil, st, 0, err
	}
	pins, err := slot.Pins(ctx, st, last, s.rangeEvents, s.present)
	return pins, st, last, err
}

// DropSlot implements replpb.SourceServer.
func (s *Server) DropSlot(ctx context.Context, req *replpb.DropSlotRequest) (*replpb.DropSlotResponse, error) {
	if err := s.slots().Drop(req.Name); err != nil {
		return nil, toStatus(err)
	}
	return &replpb.DropSlotResponse{}, nil
}

// Confirm tells the source that the destination has applied every event
// up to position; with slotName, that slot is registered or moved there.
// It returns the source's horizon.
//
// Errors: a *LostError (wrapping ErrLost) naming the first event after
// position the destination can no longer reproduce; ErrInvalid (a bad
// slot name), ErrUnavailable, wrapped.
func (c *Client) Confirm(ctx context.Context, slotName string, position uint64) (horizon uint64, err error) {
	r, err := c.rpc.Confirm(ctx, &replpb.ConfirmRequest{Slot: slotName, Position: position})
	if err != nil {
		return 0, fmt.Errorf("confirm position %d: %w", position, fromStatus(err))
	}
	if r.LostEvent != 0 {
		return r.Horizon, &LostError{
			Lost:     slot.Lost{Event: r.LostEvent, Type: journal.Type(r.LostType), Path: r.LostPath, CM: r.LostCm, RemovedBy: r.RemovedBy},
			Position: position, Slot: slotName, State: r.State,
		}
	}
	return r.Horizon, nil
}

// Slots lists the source's replication slots with their lag and what
// they pin, and its horizon.
func (c *Client) Slots(ctx context.Context) ([]slot.Pin, uint64, error) {
	r, err := c.rpc.Slots(ctx, &replpb.SlotsRequest{})
	if err != nil {
		return nil, 0, fmt.Errorf("slots: %w", fromStatus(err))
	}
	pins := make([]slot.Pin, 0, len(r.Slots))
	for _, p := range r.Slots {
		pins = append(pins, slot.Pin{
			Slot: slot.Slot{Name: p.Name, Position: p.Position,
				Created: time.Unix(0, p.CreatedUnixNano).UTC(), Updated: time.Unix(0, p.UpdatedUnixNano).UTC()},
			Lag: p.Lag, Lost: p.Lost, Entries: int(p.PinnedEntries), Bytes: p.PinnedBytes,
		})
	}
	return pins, r.Horizon, nil
}

// DropSlot removes the slot called name at the source.
//
// Errors: slot.ErrNotFound (wrapped) when there is none.
func (c *Client) DropSlot(ctx context.Context, name string) error {
	if _, err := c.rpc.DropSlot(ctx, &replpb.DropSlotRequest{Name: name}); err != nil {
		return fmt.Errorf("drop slot %q: %w", name, fromStatus(err))
	}
	return nil
}
