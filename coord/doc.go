// Package coord makes a stop job-wide: when one rank's lifeboat begins a
// stop (SIGTERM, a cloud preemption notice, --max-runtime), every other
// rank's lifeboat stops too, so that a trainer blocked in a collective
// whose peer is gone is stopped at its own grace deadline instead of after
// NCCL's timeout. It also lets the ranks agree on the one step they all
// save before they exit (lifeboat.stop_step in the Python helper).
//
// The ranks talk only through the checkpoint store (storage.Store), under
// the store's prefix:
//
//	coord/stop/<time>-rank-<R>.json           one stop record, create-only
//	coord/stop-flag.json                      the flag: the newest stop's record or claim's notice, overwritten
//	coord/steps/<stop id>/rank-<R>.step-<N>   rank R's trainer is at step N
//	coord/steps/<stop id>/agreed.json         the step every rank saves, create-only
//	coord/steps/<stop id>/flushed-rank-<R>.step-<N>  rank R's newest committed step after its final upload (.none: none)
//
// A stop record's name starts with the time it was written (UTC, by the
// writer's clock, fixed width), so names sort by time, and ends with the
// writer's rank, so two ranks never write the same name. Its body says
// who wrote it (rank, host), why (the reason), when, and the end of the
// writer's grace budget.
//
// # Watching
//
// A rank that stops stores its record, then overwrites the stop flag
// (FlagKey) with the same bytes. Each rank's Coordinator lists
// coord/stop/ at its first look; then, once per Interval, it asks the
// store for the flag's metadata only (a HEAD: size, time and SHA-256),
// and lists coord/stop/ again only when the flag changed since the
// listing before. The flag is written after the record, and its state is
// taken before the listing, so a stop written at any moment is listed at
// the next look after its flag; the records decide, by the rules below,
// and the flag left by an earlier run's stop, unchanged, makes no
// listing. A look whose HEAD fails lists as before; Check always lists;
// and every 5 minutes a rank lists anyway, so that a record whose flag
// was never written (its writer was killed between the two PUTs, or
// cannot overwrite the flag) is still followed, later. Nobody deletes the
// flag: it is one small object, and a deletion would race with a new
// stop's write. A record counts when it was
// written by another rank no earlier than ClockSkew (default 250ms) before
// this lifeboat started (the writer's clock against this node's). An
// earlier run's record is older than that: the old processes had to take
// their stop, exit and be noticed (the kubelet relists containers every
// second) before a new container, or a new pod, starts, so an old record
// never stops a new run. The allowance is for the nodes' clocks, which
// must agree within it: NTP keeps them within milliseconds. A lifeboat
// that started before a record was written is stopped by it even when the
// record was written while it was still restoring its checkpoint: the
// record's rank was preempted during this run. A record written by this rank's own
// number but not by this lifeboat (a replaced pod's predecessor) does not
// count: it is not a peer.
//
// A record stamped later than the time it is seen by more than ClockSkew
// was written by a node whose clock was ahead, in an earlier run (a
// record of this run cannot be from the future): it never counts, not
// even once real time passes its stamp, and is logged once.
//
// Rank 0 deletes records written more than a minute before it started
// (an earlier run's), and those stamped in the future by more than
// ClockSkew when it starts, so the listing stays one page. The minute leaves
// every rank that was running then time to see a record written while
// rank 0 was starting.
//
// # Agreeing on the step
//
// The job-wide stop's id is the first record's (the lowest name): two ranks
// preempted at the same moment may both write one, and every rank then
// reads the same lowest. When the trainer asks for the step (the helper
// writes StepRequestFile into --dir), the Coordinator publishes it under
// coord/steps/<id>/. When every rank's step is there, the agreed step is
// their highest: every trainer is waiting at the end of its step, so none
// has gone past it. When not every rank has answered after StepWait from
// the start of this rank's stop, some rank's trainer is blocked in the
// next step's collective (waiting for the ranks that stopped to ask): the
// agreed step is then the highest published plus one, which every rank
// can reach, since ranks in lockstep are at most one step apart. The first
// rank to decide writes agreed.json create-only and every rank takes what
// it holds, so all ranks get the same step. Without the store (it fails
// until twice StepWait), a rank decides alone, and says so; a step that
// differs between ranks is then not complete, and resume falls back to an
// older one.
//
// # A step every rank holds
//
// After its final upload, each rank publishes the newest step it holds in
// the store under the job-wide stop (Flushed) and reads the other ranks'
// until all are there or StepWait has passed; a rank whose own newest is
// higher than their lowest commits its checkpoint of that step too, so
// that the stop leaves a complete step (docs/FORMAT.md).
//
// The Coordinator writes StopFile into --dir when the stop begins on this
// rank, and again with the step once it is agreed; the helper's
// stop_requested() and stop_step() read it. Both files are named
// ".lifeboat-..." and are never part of a checkpoint.
//
// # Claims
//
// Each lifeboat with a store also claims its rank (Claim), at every world
// size, so that two live pods given one rank never mix their checkpoints:
//
//	coord/claim/rank-<R>/<run>.json   this lifeboat's claim, written when asked
//
// The run is the start time and a random suffix. A Claim writes its
// claim and lists its rank's claims at Start, before anything is
// committed. A claim proves that its pod lives on demand, not by
// renewals: when a Claim lists another claim of its rank it has not seen
// before, it writes its own claim again naming that one (ClaimRecord.Seen),
// then a ClaimNotice to the flag (FlagKey, the stop flag's one object).
// Every rank HEADs the flag once per Interval (the Coordinator's HEAD,
// passed on to the Claim, or the Claim's own in a job of one rank), and a
// Claim lists its rank's claims only when the flag changed (and every 30
// minutes, and every Interval while another claim is undecided), so a
// settled claim costs nothing beyond that HEAD. Another claim is a live
// twin once it names this lifeboat or has changed since first listed:
// ErrRankClaimed, coord.rank_claimed, Conflict delivers it once, and the
// claim is written at once with the conflict in it, and the flag, so
// that the twin stops too. One that has not answered within StaleAfter of
// this lifeboat's flag being stored, by this lifeboat's own clock, is a
// stopped pod's: ignored and deleted. A Claim that finds its own claim
// gone (taken for a stopped pod's while it could not answer) writes it
// again, with the flag (coord.claim_rewritten). Fence, called before each
// manifest, waits while a claim is neither; Release (a stop begins, or
// the exit) deletes the claim and opens the fence for the final upload,
// which a replacement pod may overlap. docs/FORMAT.md has the layout.
//
// No failure of the store disturbs training: a failed request is logged
// once (WARN) and retried at the next Interval.
package coord
