package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// FlagKey is the stop flag: one fixed object that a rank overwrites with
// its stop record's bytes once the record is stored (Flag). A watching
// rank asks the store only for the flag's metadata each Interval (a HEAD)
// and lists coord/stop/ when the flag changed: the records decide, as
// always; the flag only says when to look at them. A Claim writes a
// ClaimNotice to the same object after writing its claim for the rank's
// other claims to answer: one HEAD per Interval serves both, and any
// change makes the ranks list the stop records and their own rank's
// claims.
const FlagKey = "coord/stop-flag.json"

// relistAfter is how long a watching rank goes without listing
// coord/stop/ when the flag has not changed: a record whose flag was
// never written (its writer was killed between the two, or cannot
// overwrite the flag) is still seen within it.
const relistAfter = 5 * time.Minute

// flagState is what a Stat of the flag found: nothing, or the object's
// size, time and SHA-256 as the backend reports them. Each stop writes
// other bytes (the record names its stop; a claim's notice its claim and
// write count), so every write changes the
// SHA-256 where the backend keeps one (the S3 backend's Puts always do,
// the directory store where the filesystem has user xattrs) and the time
// elsewhere.
type flagState struct {
	present bool
	size    int64
	mod     time.Time
	sum     string
}

func (f flagState) equal(g flagState) bool {
	return f.present == g.present && f.size == g.size && f.mod.Equal(g.mod) && f.sum == g.sum
}

// Flag writes s, a stop record already stored (Write), to the stop flag,
// so that the watching ranks list the records at their next Interval.
// It replaces the flag another stop wrote: two stops at once both change
// it, whichever lands last.
func Flag(ctx context.Context, st storage.Store, s Stop) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if _, err := st.Put(ctx, FlagKey, bytes.NewReader(b), int64(len(b)), storage.PutOptions{}); err != nil {
		return fmt.Errorf("coord: write stop flag for %s: %w", s.ID, err)
	}
	return nil
}

// statFlag returns the flag's state: absent is not an error.
func statFlag(ctx context.Context, st storage.Store) (flagState, error) {
	oi, err := st.Stat(ctx, FlagKey)
	if errors.Is(err, storage.ErrNotExist) {
		return flagState{}, nil
	}
	if err != nil {
		return flagState{}, fmt.Errorf("coord: stat %s: %w", FlagKey, err)
	}
	return flagState{present: true, size: oi.Size, mod: oi.ModTime, sum: oi.SHA256}, nil
}

// look decides whether this look must list the records: the first look
// (records already stored are judged by their names), a Check, a flag
// that changed since the last listing or could not be read, and every
// relistAfter. It returns the flag's state to remember once the listing
// succeeded, and whether it is known.
func (c *Coordinator) look(ctx context.Context, force bool) (list bool, f flagState, known bool) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	f, err := statFlag(rctx, c.cfg.Store)
	if ctx.Err() != nil {
		return false, f, false // Run is ending
	}
	known = !c.failed("stat stop flag", err)
	if c.cfg.Claim != nil {
		c.cfg.Claim.flagSeen(f, known)
	}
	c.unlisted++
	due := time.Duration(c.unlisted)*c.cfg.Interval >= relistAfter
	return force || !known || !c.listed || due || !f.equal(c.flag), f, known
}
