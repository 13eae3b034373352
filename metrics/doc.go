// Package metrics exposes what lifeboat is doing as Prometheus metrics and a
// health check.
//
// It owns the metric names, their help texts and label sets, the registry
// they live in (its own, never the global one, so that tests and several
// instances do not collide), and the HTTP server for /metrics and /healthz.
// Callers record events through the methods of *Metrics; a nil *Metrics
// records nothing, so that code can call it unconditionally when metrics
// are disabled.
// An uploader's running totals are polled with Follow, which turns them
// into counter increases (Totals says which figure is which).
//
// Labels only ever take values from fixed sets (NoticeSources,
// RebalanceSources, RestartReasons, ResumeSources); anything else is recorded as "other", so
// a caller can never put a path, a URL or a secret into a label. No method
// panics, whatever its argument: lifeboat is PID 1.
//
// # Metrics
//
//	lifeboat_build_info{version,goversion}              1
//	lifeboat_ready                                      1 when ready (see /healthz), else 0
//	lifeboat_checkpoint_last_step                       step of the last committed checkpoint; -1 before any
//	lifeboat_checkpoint_last_commit_timestamp_seconds   when it was committed (Unix time); 0 before any
//	lifeboat_checkpoint_age_seconds                     seconds since that commit (since start before any), at scrape time
//	lifeboat_upload_bytes_total                         chunk bytes uploaded
//	lifeboat_upload_deduped_bytes_total                 chunk bytes found already stored
//	lifeboat_upload_dedupe_ratio                        deduped / (uploaded + deduped), at scrape time; 0 before any
//	lifeboat_upload_pending_bytes                       size of the checkpoint being uploaded; 0 if none
//	lifeboat_upload_throughput_bytes_per_second         measured upload throughput
//	lifeboat_upload_retries_total                       retried storage operations
//	lifeboat_upload_failures_total                      failed checkpoint uploads
//	lifeboat_checkpoints_interrupted_total              interrupted saves, never stored
//	lifeboat_commits_torn_total                         commits found torn afterwards (a file grew), never restored
//	lifeboat_preemption_notices_total{source}           preemption notices received: one per cloud notice (aws, gcp,
//	                                                    url) and one per stop signal received (signal: the kubelet's
//	                                                    TERM, or another of --stop-signals)
//	lifeboat_rebalance_recommendations_total{source}    rebalance recommendations received (aws): the machine is at
//	                                                    elevated risk of interruption; not a stop, not in the series above
//	lifeboat_grace_budget_left_seconds                  grace budget left, at scrape time: all of --grace until a stop
//	                                                    begins, then counting down to 0 at its end (which a notice's
//	                                                    deadline can bring in); absent in the sidecar
//	lifeboat_trainer_restarts_total{reason}             trainer restarts in place (--restart on-failure), by how the
//	                                                    trainer ended: oom (the OOM killer killed it), signal (another
//	                                                    signal), exit_code (a non-zero exit)
//	lifeboat_trainer_oom_kills_total                    trainer processes killed by the OOM killer in the trainer's
//	                                                    memory cgroup (--memory-cgroup); 0 without one
//	lifeboat_resume_step{source}                        step resumed from when lifeboat started; -1 when none (a
//	                                                    restart in place does not change it)
//	lifeboat_resume_duration_seconds{source}            how long that resume took
//	lifeboat_fresh_start_over_progress                  1 when the trainer started from scratch although the store
//	                                                    holds a complete checkpoint it did not restore, else 0
//
// plus the standard go_* and process_* collectors.
package metrics
