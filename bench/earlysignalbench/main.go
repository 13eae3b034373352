// Command earlysignalbench measures how long after its exec a SIGTERM
// still meets a default instead of the init's own handling, for several
// inits side by side: lifeboat in both build flavours (and, with -base, the
// same flavours of another revision) and a floor (./floor: a Go program
// that subscribes as lifeboat does and has nothing else to initialise).
//
// For each offset from 0 to -max in steps of -step it starts each init
// -n times (`INIT run -- sleep 0.3`, or `floor sleep 0.3`), in alternation,
// so that a change in the machine's load falls on all alike, sends SIGTERM
// that long after the exec, and records how the init ended: exit 143 (the
// init caught it) or a default (died of SIGTERM; as PID 1 of a new PID
// namespace exit 2, the Go runtime's default, or exit 0 after the child's
// 0.3 s, the kernel having discarded it). The mean uncaught window is the
// sum over offsets of the share of uncaught outcomes times the step (the
// expected length of a window that ends at a random moment). It prints a
// Markdown table, as PID 1 and not, with each init's window and its ratio
// to the floor's. Root is needed for the PID namespaces.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// init under test: name and the argv before the child's.
type initCmd struct {
	name string
	argv []string
}

// tally counts one init's outcomes at one offset.
type tally struct{ caught, died, exit2, discarded, other int }

func (t tally) total() int { return t.caught + t.died + t.exit2 + t.discarded + t.other }

func main() {
	lifeboat := flag.String("lifeboat", "", "lifeboat binary, static flavour")
	lifeboatGPU := flag.String("lifeboat-gpu", "", "lifeboat binary, gpu flavour (cgo)")
	base := flag.String("base", "", "lifeboat binary of another revision, static flavour")
	baseGPU := flag.String("base-gpu", "", "lifeboat binary of another revision, gpu flavour")
	floor := flag.String("floor", "", "the floor binary (./floor)")
	n := flag.Int("n", 6, "starts per init and offset")
	max := flag.Duration("max", 40*time.Millisecond, "last offset")
	step := flag.Duration("step", time.Millisecond, "offset step")
	flag.Parse()

	var inits []initCmd
	for _, in := range []struct{ name, bin string }{
		{"lifeboat static", *lifeboat}, {"lifeboat gpu", *lifeboatGPU},
		{"base static", *base}, {"base gpu", *baseGPU},
	} {
		if in.bin != "" {
			inits = append(inits, initCmd{in.name, []string{in.bin, "run", "--log-level", "error", "--"}})
		}
	}
	if *floor == "" || len(inits) == 0 {
		fmt.Fprintln(os.Stderr, "earlysignalbench: -floor and at least -lifeboat are needed")
		os.Exit(2)
	}
	inits = append(inits, initCmd{"floor", []string{*floor}})

	var offsets []time.Duration
	for d := time.Duration(0); d <= *max; d += *step {
		offsets = append(offsets, d)
	}
	fmt.Printf("| init | mode | uncaught (ms) | of which the kernel's default | the runtime's default | vs floor |\n|---|---|---:|---:|---:|---:|\n")
	for _, pid1 := range []bool{false, true} {
		res := make([][]tally, len(inits))
		for i := range res {
			res[i] = make([]tally, len(offsets))
		}
		for range *n {
			for j, d := range offsets {
				for i, in := range inits {
					trial(in, pid1, d, &res[i][j])
				}
			}
		}
		mode := "plain"
		if pid1 {
			mode = "PID 1"
		}
		var floorWin float64
		rows := make([]string, len(inits))
		for i := len(inits) - 1; i >= 0; i-- {
			var win, kernel, runtime float64
			for j := range offsets {
				t := res[i][j]
				ms := float64(*step) / float64(time.Millisecond) / float64(t.total())
				win += float64(t.died+t.exit2+t.discarded) * ms
				kernel += float64(t.discarded) * ms
				runtime += float64(t.exit2) * ms
				if t.other > 0 {
					fmt.Fprintf(os.Stderr, "%s %s at %s: %d starts ended otherwise\n", inits[i].name, mode, offsets[j], t.other)
				}
			}
			if inits[i].name == "floor" {
				floorWin = win
			}
			split := []string{"together", ""}
			if pid1 {
				split = []string{fmt.Sprintf("%.1f", kernel), fmt.Sprintf("%.1f", runtime)}
			}
			rows[i] = fmt.Sprintf("| %s | %s | %.1f | %s | %s | %.1fx |", inits[i].name, mode, win, split[0], split[1], win/floorWin)
		}
		for _, r := range rows {
			fmt.Println(r)
		}
	}
}

// trial starts in, sends SIGTERM d after its exec and tallies the outcome.
func trial(in initCmd, pid1 bool, d time.Duration, t *tally) {
	cmd := exec.Command(in.argv[0], append(in.argv[1:], "sleep", "0.3")...)
	if pid1 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	if err := cmd.Start(); err != nil { // returns once the exec has succeeded
		fmt.Fprintf(os.Stderr, "earlysignalbench: %s: %v\n", strings.Join(in.argv, " "), err)
		os.Exit(1)
	}
	start := time.Now()
	for time.Since(start) < d { // spin: a sleep's wake-up is coarser than the step
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	_ = cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited() && ws.ExitStatus() == 143:
		t.caught++
	case ws.Signaled() && ws.Signal() == syscall.SIGTERM:
		t.died++
	case ws.Exited() && ws.ExitStatus() == 2:
		t.exit2++
	case ws.Exited() && ws.ExitStatus() == 0:
		t.discarded++
	default:
		t.other++
	}
}
