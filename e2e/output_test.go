package e2e

// What the binary prints for programs to read, as a program reads it: the
// JSON of ls, verify and doctor, and the exit codes that are not a
// trainer's. These mirror the types cmd/lifeboat encodes; a field renamed
// there and not here fails the tests that read it.

import (
	"time"

	"github.com/lifeboat-project/lifeboat/limits/gpu"
	"github.com/lifeboat-project/lifeboat/limits/memory"
)

// codeRankClaimed is lifeboat's exit code when another live pod claims
// its rank (README, "Exit codes").
const codeRankClaimed = 78

// lsEntry is one line of `lifeboat ls --json`.
type lsEntry struct {
	Step            int64     `json:"step"`
	Revision        int       `json:"revision"`
	Counter         bool      `json:"counter"`
	Line            string    `json:"line"`
	IDs             []string  `json:"ids"`
	Created         time.Time `json:"created"`
	Ranks           []int     `json:"ranks"`
	WorldSize       int       `json:"world_size"`
	Bytes           int64     `json:"bytes"`
	Complete        bool      `json:"complete"`
	Incomplete      string    `json:"incomplete,omitempty"`
	PassedOver      string    `json:"passed_over,omitempty"`
	Torn            bool      `json:"torn,omitempty"`
	Restorable      bool      `json:"restorable"`
	ChunksChecked   bool      `json:"chunks_checked"`
	MissingChunks   int       `json:"missing_chunks,omitempty"`
	WrongSizeChunks int       `json:"wrong_size_chunks,omitempty"`
	Errors          []string  `json:"errors,omitempty"`
}

// verifyEntry is one step of `lifeboat verify --json`.
type verifyEntry struct {
	Step       int64           `json:"step"`
	WorldSize  int             `json:"world_size"`
	Revision   int             `json:"revision"`
	Ranks      []verifyRank    `json:"ranks"`
	PassedOver string          `json:"passed_over,omitempty"`
	ReadData   string          `json:"read_data"`
	DataCheck  string          `json:"data_check"`
	Manifests  int             `json:"manifests"`
	Chunks     int             `json:"chunks"`
	ChunksRead int             `json:"chunks_read"`
	BytesRead  int64           `json:"bytes_read"`
	OK         bool            `json:"ok"`
	Problems   []verifyProblem `json:"problems"`
}

// verifyRank is one rank's revision that verify checked.
type verifyRank struct {
	Rank     int    `json:"rank"`
	Revision int    `json:"revision"`
	Counter  bool   `json:"counter"`
	Manifest string `json:"manifest"`
}

// verifyProblem is one problem verify found.
type verifyProblem struct {
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Detail string `json:"detail"`
}

// doctorReport is `lifeboat doctor --json`.
type doctorReport struct {
	Version     string       `json:"version"`
	Flavour     string       `json:"flavour"`
	PID1        bool         `json:"pid1"`
	GPU         *gpu.Setup   `json:"gpu"`
	GPUError    string       `json:"gpu_error,omitempty"`
	Memory      memory.Plan  `json:"memory"`
	Protections []protection `json:"protections"`
	Store       *storeReport `json:"store,omitempty"`
	Failed      bool         `json:"failed"`
}

// protection is one protection in doctor's report.
type protection struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Detail string `json:"detail"`
	Failed bool   `json:"failed,omitempty"`
}

// A protection's state in doctor's report.
const (
	stateEnforced       = "enforced"
	stateNotEnforceable = "not_enforceable"
	stateOff            = "off"
)

// storeReport is the store's part of doctor's report.
type storeReport struct {
	Store             string `json:"store"`
	Reachable         bool   `json:"reachable"`
	Error             string `json:"error,omitempty"`
	Checkpoints       int    `json:"checkpoints"`
	Latest            int64  `json:"latest_complete_step"`
	ConditionalWrites string `json:"conditional_writes,omitempty"`
}
