package main

import (
	"strings"
	"testing"
)

func TestRankSources(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flagRank   int // -1: not given
		flagSize   int
		env        map[string]string
		rank, size int
		err        string
	}{
		{name: "defaults", flagRank: -1, flagSize: -1, rank: 0, size: 1},
		{name: "flags win", flagRank: 2, flagSize: 4, env: map[string]string{"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "8"}, rank: 2, size: 4},
		{name: "paddle", flagRank: -1, flagSize: -1, env: map[string]string{"PADDLE_TRAINER_ID": "3", "PADDLE_TRAINERS_NUM": "4", "RANK": "1", "WORLD_SIZE": "2"}, rank: 3, size: 4},
		{name: "torchrun", flagRank: -1, flagSize: -1, env: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "JOB_COMPLETION_INDEX": "0"}, rank: 1, size: 2},
		{name: "indexed job", flagRank: -1, flagSize: 4, env: map[string]string{"JOB_COMPLETION_INDEX": "3", "VC_TASK_INDEX": "1"}, rank: 3, size: 4},
		{name: "volcano", flagRank: -1, flagSize: -1, env: map[string]string{"VC_TASK_INDEX": "2", "WORLD_SIZE": "3"}, rank: 2, size: 3},
		{name: "empty variables are unset", flagRank: -1, flagSize: -1, env: map[string]string{"PADDLE_TRAINER_ID": "", "RANK": " ", "JOB_COMPLETION_INDEX": "1", "PADDLE_TRAINERS_NUM": "", "WORLD_SIZE": "2"}, rank: 1, size: 2},
		{name: "world size flag with rank from env", flagRank: -1, flagSize: 2, env: map[string]string{"PADDLE_TRAINERS_NUM": "8", "RANK": "1"}, rank: 1, size: 2},
		{name: "index without world size", flagRank: -1, flagSize: -1, env: map[string]string{"JOB_COMPLETION_INDEX": "2"},
			err: "rank 2 (from JOB_COMPLETION_INDEX) of world size 1 (from the default)"},
		{name: "rank above world size", flagRank: 3, flagSize: 2, err: "must be below --world-size"},
		{name: "not a number", flagRank: -1, flagSize: -1, env: map[string]string{"VC_TASK_INDEX": "worker-1"}, err: `VC_TASK_INDEX="worker-1" is not a non-negative number (it sets --rank)`},
		{name: "negative", flagRank: -1, flagSize: -1, env: map[string]string{"WORLD_SIZE": "-2"}, err: `WORLD_SIZE="-2" is not a non-negative number (it sets --world-size)`},
		{name: "zero world size", flagRank: -1, flagSize: 0, err: "world size 0"},
		// On the code before, every pod ran as rank 0.
		{name: "world size without a rank", flagRank: -1, flagSize: -1, env: map[string]string{"WORLD_SIZE": "2"},
			err: "world size 2 (from WORLD_SIZE) but no rank: set --rank (LIFEBOAT_RANK)"},
		{name: "world size flag without a rank", flagRank: -1, flagSize: 2, err: "world size 2 (from --world-size) but no rank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := rankOptions{rank: tc.flagRank, worldSize: tc.flagSize}
			err := o.withDefaults(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("resolve: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.rank != tc.rank || o.worldSize != tc.size {
				t.Fatalf("rank %d of %d, want %d of %d", o.rank, o.worldSize, tc.rank, tc.size)
			}
		})
	}
}
