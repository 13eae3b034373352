package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Keys of the conditional-write probe, outside the checkpoint format (its
// readers ignore them, and prune never touches them).
const (
	// ProbeRecordKey is where a store remembers that a probe found its
	// create-only writes enforced, so that the ranks of one job do not
	// each probe again.
	ProbeRecordKey = "probe/conditional-writes.json"
	// probeKeyPrefix begins the key a probe writes twice and deletes.
	probeKeyPrefix = "probe/create-only-"
)

// ProbeMaxAge is how long a record of a passed probe is believed: a store
// whose server changed (a new gateway or proxy in front of the bucket) is
// probed again within a day.
const ProbeMaxAge = 24 * time.Hour

// ErrNoConditionalWrites: the store accepted a create-only Put of a key
// that already existed (S3: it ignored If-None-Match: *). Commits and stop
// records rely on that refusal: without it two writers of one step and
// rank overwrite each other's manifests.
var ErrNoConditionalWrites = errors.New("the store does not refuse a create-only write of an existing key (If-None-Match: *)")

// Probe is what ProbeConditionalWrites found.
type Probe struct {
	// Checked is when the probe that vouches for the store ran: the
	// record's time as the store reports it, or now.
	Checked time.Time
	// Cached says the answer is an earlier probe's record, younger than
	// ProbeMaxAge.
	Cached bool
}

// probeRecord is ProbeRecordKey's content.
type probeRecord struct {
	Checked time.Time `json:"checked"`
	Result  string    `json:"result"`
}

// ProbeConditionalWrites checks that st refuses a create-only Put of an
// existing key: it writes a new key under probe/ create-only twice, wants
// ErrExists the second time, and deletes the key. A passed probe is
// recorded at ProbeRecordKey; while that record is younger than
// ProbeMaxAge by the store's own time, the record answers and nothing is
// written. A store that accepted the second write gives an error wrapping
// ErrNoConditionalWrites, marked permanent; any other failure is the
// store's error. now is time.Now outside tests.
func ProbeConditionalWrites(ctx context.Context, st Store, now func() time.Time) (Probe, error) {
	info, err := st.Stat(ctx, ProbeRecordKey)
	switch {
	case err == nil:
		// A record from the future (a skewed clock) is not believed.
		if age := now().Sub(info.ModTime); age >= -time.Minute && age < ProbeMaxAge {
			return Probe{Checked: info.ModTime, Cached: true}, nil
		}
	case !errors.Is(err, ErrNotExist):
		return Probe{}, fmt.Errorf("storage: probe conditional writes: %w", err)
	}
	if err := probeCreateOnly(ctx, st); err != nil {
		return Probe{}, err
	}
	checked := now()
	b, _ := json.Marshal(probeRecord{Checked: checked.UTC(), Result: "a second create-only write of one key was refused"})
	// Failing to record costs only a probe at the next start.
	_, _ = st.Put(ctx, ProbeRecordKey, bytes.NewReader(b), int64(len(b)), PutOptions{})
	return Probe{Checked: checked}, nil
}

// probeCreateOnly writes one new key create-only twice. The first write
// may find its key there when a retry of it follows one that the store
// applied but did not answer: then a new key is tried.
func probeCreateOnly(ctx context.Context, st Store) error {
	for attempt := 0; attempt < 3; attempt++ {
		var r [8]byte
		_, _ = rand.Read(r[:])
		key := probeKeyPrefix + hex.EncodeToString(r[:])
		first := []byte("first create-only write\n")
		_, err := st.Put(ctx, key, bytes.NewReader(first), int64(len(first)), PutOptions{IfNotExists: true})
		if errors.Is(err, ErrExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("storage: probe conditional writes: first create-only write of %s: %w", key, err)
		}
		second := []byte("second create-only write: must be refused\n")
		_, err = st.Put(ctx, key, bytes.NewReader(second), int64(len(second)), PutOptions{IfNotExists: true})
		_ = st.Delete(ctx, key)
		switch {
		case errors.Is(err, ErrExists):
			return nil
		case err == nil:
			return Permanent(fmt.Errorf("storage: %s: %w (a second create-only write of %s succeeded)", st, ErrNoConditionalWrites, key))
		default:
			return fmt.Errorf("storage: probe conditional writes: second create-only write of %s: %w", key, err)
		}
	}
	return fmt.Errorf("storage: probe conditional writes: three new keys under %s were each found existing at their first write", probeKeyPrefix)
}
