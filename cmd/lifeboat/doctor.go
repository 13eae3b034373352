package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/limits/memory"
)

// doctorOptions are the flags of `lifeboat doctor`.
type doctorOptions struct {
	common  commonOptions
	store   storeOptions
	gpu     gpuOptions
	reserve string
	json    bool
}

// doctorReport is what `lifeboat doctor` found. It holds no credentials.
type doctorReport struct {
	Version string       `json:"version"`
	PID1    bool         `json:"pid1"`
	GPU     *gpuPlan     `json:"gpu"`
	Memory  memory.Plan  `json:"memory"`
	Store   *storeReport `json:"store,omitempty"`
}

type storeReport struct {
	Store       string `json:"store"`
	Reachable   bool   `json:"reachable"`
	Error       string `json:"error,omitempty"`
	Checkpoints int    `json:"checkpoints"`
	Latest      int64  `json:"latest_complete_step"`
}

func doctorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &doctorOptions{}
	fs := newFlagSet("doctor", stderr)
	o.common.register(fs)
	o.store.register(fs)
	o.gpu.register(fs)
	fs.StringVar(&o.reserve, "memory-reserve", "64MiB", "memory kept for lifeboat out of the container's limit")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.Usage = flagUsage(fs, stderr, "lifeboat doctor [--store URL] [--json]")
	if code := parseCmd(fs, args, stderr); code >= 0 {
		return code
	}
	if code := checkCmd("doctor", o.validate(), stderr); code >= 0 {
		return code
	}
	log, ok := o.common.logger("doctor", stderr)
	if !ok {
		return 2
	}
	rep := doctorReport{Version: version, PID1: os.Getpid() == 1}
	gp, err := o.gpu.plan(os.Environ(), slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat doctor: %v\n", err)
		return 1
	}
	defer gp.close()
	rep.GPU = gp
	reserve, err := parseBytes(o.reserve)
	if err != nil || reserve < 0 {
		fmt.Fprintf(stderr, "lifeboat doctor: --memory-reserve (LIFEBOAT_MEMORY_RESERVE) is %q; give a size such as 64MiB\n", o.reserve)
		return 2
	}
	if m, err := memory.New(memory.Config{Reserve: reserve, Log: log}); err == nil {
		rep.Memory = m.Plan()
	}
	code := 0
	if o.store.url != "" {
		sr := &storeReport{Store: o.store.url, Latest: -1}
		rep.Store = sr
		if s, err := o.store.open(ctx); err != nil {
			sr.Error, code = err.Error(), 1
		} else {
			sr.Store = s.String()
			snaps, err := checkpoint.List(ctx, s)
			if err != nil {
				sr.Error, code = err.Error(), 1
			} else {
				sr.Reachable, sr.Checkpoints = true, len(snaps)
				for _, sn := range snaps {
					if sn.Complete && sn.Step > sr.Latest {
						sr.Latest = sn.Step
					}
				}
			}
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitOnErr(err, "doctor", stderr)
		}
		return code
	}
	w := &strings.Builder{}
	fmt.Fprintf(w, "lifeboat %s (PID 1: %v)\n\nGPUs\n", rep.Version, rep.PID1)
	if gp == nil {
		fmt.Fprintln(w, "  none given (no NVIDIA_VISIBLE_DEVICES, --gpus or --gpu-memory-limit): the trainer's GPU environment is left as it is")
	} else {
		fmt.Fprintf(w, "  given: %s %q\n  NVML: %s\n", gp.Source, gp.Request, gp.NVML)
		for _, d := range gp.Inventory {
			fmt.Fprintf(w, "  seen: %d %s %s, %d MiB, MIG %v (%d instances)\n", d.Index, d.UUID, d.Name, d.MemoryTotal>>20, d.MIGEnabled, len(d.MIG))
		}
		fmt.Fprintf(w, "  trainer gets (checked by NVML: %v):\n", gp.Checked)
		for _, kv := range gp.Env {
			fmt.Fprintf(w, "    %s\n", kv)
		}
		for _, n := range gp.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, c := range gp.Conflicts {
			fmt.Fprintf(w, "  conflict: %s\n", c)
		}
	}
	fmt.Fprintf(w, "\nMemory\n  %s\n", rep.Memory.String())
	if sr := rep.Store; sr != nil {
		fmt.Fprintf(w, "\nStore\n  %s: ", sr.Store)
		if sr.Reachable {
			fmt.Fprintf(w, "reachable, %d checkpoints, latest complete step %d\n", sr.Checkpoints, sr.Latest)
		} else {
			fmt.Fprintf(w, "NOT reachable: %s\n", sr.Error)
		}
	}
	fmt.Fprint(stdout, w.String())
	return code
}
