package gpu

import (
	"fmt"
	"slices"
	"strings"
)

// Sample is one look at the memory of a GPU or MIG device the trainer was
// given.
type Sample struct {
	Device string // UUID
	Used   uint64 // bytes in use on the device, by every process and the driver
	Total  uint64 // bytes
	// PerProcess is true when NVML's process list could be matched to the
	// trainer's tree: NVML listed at least one process on the device and
	// every pid it listed is a process of the tree. ByPID then holds each
	// one's use. Inside a container NVML reports the host's pids, which
	// match nothing (or, by chance, an unrelated process) in the
	// container's own PID namespace; the device's Used is then the measure.
	PerProcess bool
	ByPID      map[int]uint64
}

// Measure samples the device with that UUID for the trainer's tree (its
// pids as lifeboat sees them). A device assigned to the container belongs
// to it, so what is used on it is the trainer's: Used comes from NVML's
// device (or MIG instance) memory, which needs no PID translation. NVML's
// per-process figures are used only where its pids are verifiably the
// container's own (PerProcess). A failure to list processes is not an
// error: the device figure stands.
func Measure(d Driver, uuid string, tree []int) (Sample, error) {
	mem, err := d.DeviceMemory(uuid)
	if err != nil {
		return Sample{}, fmt.Errorf("gpu: memory of %s: %w", uuid, err)
	}
	s := Sample{Device: uuid, Used: mem.Used, Total: mem.Total}
	procs, err := d.ComputeProcesses(uuid)
	if err != nil || len(procs) == 0 {
		return s, nil
	}
	byPID := map[int]uint64{}
	for _, p := range procs {
		if !slices.Contains(tree, p.PID) {
			return s, nil
		}
		if p.UsedMemory != MemoryUnknown {
			byPID[p.PID] += p.UsedMemory
		}
	}
	s.PerProcess, s.ByPID = true, byPID
	return s, nil
}

// Policy is what the watchdog does when the trainer tree goes over its limit.
type Policy int

const (
	// PolicyWarn only warns.
	PolicyWarn Policy = iota
	// PolicyTerm sends SIGTERM to the offending pids (the trainer can save).
	PolicyTerm
	// PolicyKill sends SIGKILL to them.
	PolicyKill
)

// ParsePolicy parses "warn", "term" or "kill".
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "warn":
		return PolicyWarn, nil
	case "term":
		return PolicyTerm, nil
	case "kill":
		return PolicyKill, nil
	}
	return 0, fmt.Errorf("gpu: policy %q: want warn, term or kill", s)
}

func (p Policy) String() string {
	switch p {
	case PolicyWarn:
		return "warn"
	case PolicyTerm:
		return "term"
	case PolicyKill:
		return "kill"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Action is what Decide asks the caller to do.
type Action int

const (
	ActionNone Action = iota
	ActionWarn        // log a warning, signal nothing
	ActionTerm        // SIGTERM Verdict.PIDs
	ActionKill        // SIGKILL Verdict.PIDs
)

func (a Action) String() string {
	if a < ActionNone || a > ActionKill {
		return fmt.Sprintf("Action(%d)", int(a))
	}
	return [...]string{"none", "warn", "term", "kill"}[a]
}

// Verdict is Decide's answer.
type Verdict struct {
	Action Action
	Total  uint64 // bytes: the tree's pids' use, or the device's
	PIDs   []int  // the pids to signal, all of the tree's: see Decide
	Reason string // a sentence for the log; "" with ActionNone
	// PerProcess says Total is the sum of NVML's per-process figures for
	// the tree (Sample.PerProcess), not the device's use.
	PerProcess bool
}

// Decide applies policy to a sample against limit bytes on one device (0:
// no limit). With per-process figures (s.PerProcess) the total is the sum
// over the tree's pids in s.ByPID and only those pids are named, most
// memory first; otherwise the total is the device's use and every pid of
// tree is named, the trainer's processes being the only ones the container
// runs on its GPU. No pid outside tree is ever named. Over the limit the
// policy's action is returned; within margin bytes of it, a warning;
// otherwise nothing. Decide is pure.
func Decide(policy Policy, s Sample, tree []int, limit, margin uint64) Verdict {
	if policy < PolicyWarn || policy > PolicyKill {
		policy = PolicyWarn
	}
	v := Verdict{PerProcess: s.PerProcess}
	if s.PerProcess {
		for pid, b := range s.ByPID {
			if b == MemoryUnknown || !slices.Contains(tree, pid) {
				continue
			}
			v.Total += b
			v.PIDs = append(v.PIDs, pid)
		}
		slices.SortFunc(v.PIDs, func(a, b int) int {
			if s.ByPID[a] != s.ByPID[b] {
				if s.ByPID[a] > s.ByPID[b] {
					return -1
				}
				return 1
			}
			return a - b
		})
	} else {
		v.Total = s.Used
		v.PIDs = slices.Sorted(slices.Values(tree))
	}
	what := "the trainer's processes use"
	if !s.PerProcess {
		what = "the trainer's device holds"
	}
	switch {
	case limit == 0 || len(v.PIDs) == 0:
		v.PIDs = nil
		return v
	case v.Total > limit:
		v.Action = [...]Action{PolicyWarn: ActionWarn, PolicyTerm: ActionTerm, PolicyKill: ActionKill}[policy]
		v.Reason = fmt.Sprintf("%s %d MiB of GPU memory, over the watchdog's limit of %d MiB (policy %s)", what, v.Total/mib, limit/mib, policy)
	case limit-v.Total < margin:
		v.Action = ActionWarn
		v.Reason = fmt.Sprintf("%s %d MiB of GPU memory, within %d MiB of the watchdog's limit of %d MiB", what, v.Total/mib, margin/mib, limit/mib)
	default:
		v.PIDs = nil
	}
	return v
}
