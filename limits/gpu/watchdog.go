package gpu

import (
	"fmt"
	"slices"
	"strings"
)

// Usage returns the GPU memory, in bytes, used on the GPU or MIG device with
// that UUID by each pid of tree (the trainer's process tree). Processes outside
// tree are never returned, whatever NVML lists; neither are those whose usage
// NVML cannot report (MemoryUnknown). A pid of tree without a process on the
// device is absent.
func Usage(d Driver, uuid string, tree []int) (map[int]uint64, error) {
	procs, err := d.ComputeProcesses(uuid)
	if err != nil {
		return nil, fmt.Errorf("gpu: processes on %s: %w", uuid, err)
	}
	usage := map[int]uint64{}
	for _, p := range procs {
		if p.UsedMemory == MemoryUnknown || !slices.Contains(tree, p.PID) {
			continue
		}
		usage[p.PID] += p.UsedMemory
	}
	return usage, nil
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
	Total  uint64 // bytes used by the tree's pids
	PIDs   []int  // the tree's pids using the device, most memory first; the only ones to signal
	Reason string // a sentence for the log; "" with ActionNone
}

// Decide applies policy to usage (pid -> bytes, from Usage) against limit
// bytes on one device (0: no limit). Only pids in tree are considered: any
// other entry of usage is ignored, so a foreign process can never be counted
// or signalled. Over the limit the policy's action is returned; within margin
// bytes of it, a warning; otherwise nothing. Decide is pure.
func Decide(policy Policy, usage map[int]uint64, tree []int, limit, margin uint64) Verdict {
	if policy < PolicyWarn || policy > PolicyKill {
		policy = PolicyWarn
	}
	var v Verdict
	for pid, b := range usage {
		if b == MemoryUnknown || !slices.Contains(tree, pid) {
			continue
		}
		v.Total += b
		v.PIDs = append(v.PIDs, pid)
	}
	slices.SortFunc(v.PIDs, func(a, b int) int {
		if usage[a] != usage[b] {
			if usage[a] > usage[b] {
				return -1
			}
			return 1
		}
		return a - b
	})
	switch {
	case limit == 0 || len(v.PIDs) == 0:
		v.PIDs = nil
		return v
	case v.Total > limit:
		v.Action = [...]Action{PolicyWarn: ActionWarn, PolicyTerm: ActionTerm, PolicyKill: ActionKill}[policy]
		v.Reason = fmt.Sprintf("trainer uses %d MiB of GPU memory, over its limit of %d MiB (policy %s)", v.Total/mib, limit/mib, policy)
	case limit-v.Total < margin:
		v.Action = ActionWarn
		v.Reason = fmt.Sprintf("trainer uses %d MiB of GPU memory, within %d MiB of its limit of %d MiB", v.Total/mib, margin/mib, limit/mib)
	default:
		v.PIDs = nil
	}
	return v
}
