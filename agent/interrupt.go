package agent

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/watch"
)

// Death is a process of the trainer's tree that ended abnormally: killed
// by a signal or exited non-zero. A save it was writing may be cut short.
type Death struct {
	Pid int
	How string // "killed by SIGKILL", "exit 1", "SIGKILLed at the grace deadline"
	At  time.Time
}

// maxDeaths bounds the deaths remembered; older ones matter only for files
// that changed before them, which newer deaths cover as well.
const maxDeaths = 64

// Reaped is told of each process of the trainer's tree that was reaped
// (the supervisor's Observer.Reaped): one that died by a signal or exited non-zero
// may have cut a save short, and is a Death. It never blocks for long.
func (a *Agent) Reaped(pid int, ws unix.WaitStatus, at time.Time) {
	var how string
	switch {
	case ws.Signaled():
		how = "killed by SIG" + signals.Name(ws.Signal())
	case ws.Exited() && ws.ExitStatus() != 0:
		how = "exit " + strconv.Itoa(ws.ExitStatus())
	default:
		return
	}
	a.Died(Death{Pid: pid, How: how, At: at})
}

// Died tells the agent that a process of the trainer's tree ended
// abnormally. Safe for concurrent use.
func (a *Agent) Died(d Death) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deaths = append(a.deaths, d)
	if len(a.deaths) > maxDeaths {
		a.deaths = a.deaths[len(a.deaths)-maxDeaths:]
	}
}

// Killing tells the agent that the trainer's tree is about to be
// SIGKILLed: the files open for writing now are interrupted saves whatever
// their format says, and every file that changed shortly before is
// suspect. Safe for concurrent use (it reads /proc, not the watcher's
// state).
func (a *Agent) Killing(at time.Time) {
	busy := a.cfg.Watcher.OpenForWrite()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.openAtKill == nil {
		a.openAtKill = map[string]time.Time{}
	}
	for p := range busy {
		a.openAtKill[p] = at
	}
	a.deaths = append(a.deaths, Death{Pid: 0, How: "SIGKILLed at the grace deadline", At: at})
}

// interruption says why r is an interrupted save, or "" when nothing says
// it is. The rules (docs/RELIABILITY.md):
//   - a file still open for writing when the tree was SIGKILLed is
//     interrupted;
//   - a file whose content a format check recognises and vouches for
//     (format.HeadBeneath; for pickle and JSON, the upload's reading pass)
//     is whole or torn by that check alone;
//   - any other file whose last change (modification or status change)
//     came less than the settle time before an abnormal death, and not
//     after it, is interrupted: its writer may be the process that died.
func (a *Agent) interruption(r watch.Ready) (file string, d Death, why string) {
	// Copies, so that no lock is held while a file is read: Reaped, on
	// the supervisor's path, takes it.
	a.mu.Lock()
	openAtKill := maps.Clone(a.openAtKill)
	deaths := slices.Clone(a.deaths)
	a.mu.Unlock()
	for _, f := range r.Files {
		p := path.Join(r.Dir, f.Path)
		if at, ok := openAtKill[p]; ok && !lastChange(f).After(at) {
			return p, Death{How: "SIGKILLed at the grace deadline", At: at}, "open for writing when the trainer's tree was SIGKILLed"
		}
	}
	for _, f := range r.Files {
		p := path.Join(r.Dir, f.Path)
		changed := lastChange(f)
		for _, d := range deaths {
			if changed.After(d.At) || d.At.Sub(changed) >= a.cfg.Settle {
				continue
			}
			if a.cfg.VerifyFormat {
				// The content decides: a check that vouches for the
				// file clears it; one that finds it torn says why. The
				// streamed checks (pickle, JSON) are left to the
				// upload, which reads the file anyway.
				kind, err := format.HeadBeneath(a.cfg.Dir, p)
				switch {
				case err == nil && kind.Checked():
					goto next
				case errors.Is(err, format.ErrTorn):
					return p, d, format.Reason(err)
				}
			}
			return p, d, fmt.Sprintf("changed %s before a process of the trainer ended (%s) and no format check vouches for it",
				d.At.Sub(changed).Round(time.Millisecond), d.How)
		}
	next:
	}
	return "", Death{}, ""
}

// lastChange is when f's content or status last changed.
func lastChange(f watch.File) time.Time {
	if f.ChangeTime.After(f.ModTime) {
		return f.ChangeTime
	}
	return f.ModTime
}
