package signals

import "fmt"

// Delivery says how a stop signal (a stop signal received, a preemption
// notice, the maximum runtime) reaches the trainer's tree. Other signals
// are not affected: they go to the trainer's process group, or to the
// trainer alone (Target.ChildOnly).
type Delivery int

const (
	// MainFirst sends the stop signal to the trainer's main process only.
	// The rest of its tree gets it when the main process has exited, or
	// when half the trainer's budget has passed without it exiting (a
	// launcher that catches the signal and does not pass it on). The
	// process that saves is the main one; its helpers (PyTorch's
	// DataLoader workers) die of a stop signal that does not come from
	// their parent, and the main process then fails before it has saved.
	MainFirst Delivery = iota
	// Group sends the stop signal to the main process's whole process
	// group at once: lifeboat's delivery before MainFirst.
	Group
	// MainOnly sends the stop signal to the main process only; the rest
	// of its tree gets it when the main process has exited.
	MainOnly
)

// String returns the name ParseDelivery reads.
func (d Delivery) String() string {
	switch d {
	case MainFirst:
		return "main-first"
	case Group:
		return "group"
	case MainOnly:
		return "main-only"
	}
	return fmt.Sprintf("Delivery(%d)", int(d))
}

// ParseDelivery reads "main-first", "group" or "main-only".
func ParseDelivery(s string) (Delivery, error) {
	for _, d := range []Delivery{MainFirst, Group, MainOnly} {
		if s == d.String() {
			return d, nil
		}
	}
	return 0, fmt.Errorf("stop delivery %q: use main-first, group or main-only", s)
}
