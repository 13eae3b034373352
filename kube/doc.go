// Package kube tells the Kubernetes API server what lifeboat does, over
// plain HTTPS with the pod's service-account token (no client library):
//
//   - Events on lifeboat's own pod, shown by `kubectl describe pod`
//     (reasons below), reported by component "lifeboat";
//   - checkpoint-freshness annotations on the pod (Annotation*), kept
//     current at each commit and refreshed in between, and optionally
//     controller.kubernetes.io/pod-deletion-cost derived from them;
//   - the pod's terminationGracePeriodSeconds, for --grace auto.
//
// It never stands in the way of training. Every call has a short timeout;
// events and annotations are sent by one background goroutine from a
// bounded queue (dropped when it is full) and flushed best-effort at exit;
// a missing permission (401, 403) or a pod that does not exist (404)
// turns its feature off with one warning naming the permission; any other
// failure drops that one request. The token is read from its file at each
// request (the kubelet rotates it) and never reaches a log line or an
// error.
//
// Events (type, reason: when):
//
//	Normal  CheckpointCommitted: a checkpoint was committed during training
//	Normal  PreemptedCommitted: after a stop, the final upload committed a step (or nothing new was saved)
//	Warning PreemptedCommitFailed: after a stop, the final upload did not commit in time
//	Normal  CheckpointRestored: a checkpoint was restored before the trainer (re)started
//	Warning SaveInterrupted: an interrupted save was found and ignored
//	Warning FreshStartOverProgress: the trainer starts from scratch although the store holds a complete step
//	Warning RankClaimedTwice: another live pod claims this pod's rank; this one commits nothing more and exits 78
//	Warning UploadFailing: uploads fail; at most one event per RateLimit, counting the failures between
package kube
