// Package notice watches for cloud preemption notices: the warning a cloud
// gives shortly before it takes a spot or preemptible machine away, earlier
// than the kubelet's SIGTERM.
//
// It owns the sources, how each is asked, and what counts as a notice.
// Watch starts one goroutine per source; each sends at most one Notice of
// each kind (the first it sees) and never blocks anything else: a dead or
// slow metadata server only makes that goroutine try again, every request
// bounded by a timeout.
//
// A notice is of one of two kinds. KindPreemption says the machine is going
// away: the caller stops the trainer. KindRebalance is AWS's rebalance
// recommendation: the machine is at elevated risk of interruption, usually
// minutes before an interruption notice (or without one), but not going
// away yet; the caller decides what to do (lifeboat logs it, counts it,
// and with --notice-on-rebalance has the trainer save). HTTP retries and backoff within one check are
// github.com/hashicorp/go-retryablehttp's; between checks each source waits
// Config.Interval.
//
// # Sources
//
// "aws" (EC2 spot, IMDSv2): PUT /latest/api/token with
// X-aws-ec2-metadata-token-ttl-seconds: 21600, then every Interval, with
// X-aws-ec2-metadata-token, GET
// /latest/meta-data/events/recommendations/rebalance (until one has been
// seen) and GET /latest/meta-data/spot/instance-action. 404 means none.
// A rebalance 200 with {"noticeTime": RFC3339} is a KindRebalance notice
// whose Issued is that time. An instance-action 200 with {"action":
// "terminate"|"stop"|"hibernate", "time": RFC3339} is a KindPreemption
// notice whose Deadline is that time and whose Detail is the action; both
// found in one check are sent rebalance first. The token is fetched again
// before it expires and on 401. The endpoint is http://169.254.169.254
// unless AWS_EC2_METADATA_SERVICE_ENDPOINT (a URL) or
// AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE=IPv6 says otherwise, and
// AWS_EC2_METADATA_DISABLED=true makes the aws source a configuration
// error, as in the AWS SDKs (Config.ReadEnv).
//
// "gcp" (preemptible and spot VMs): GET
// /computeMetadata/v1/instance/preempted?wait_for_change=true&last_etag=ETAG
// with Metadata-Flavor: Google, a long poll that the server answers when the
// value changes (or at timeout_sec). "TRUE" is a notice whose Deadline is
// now + 30s (GCP's documented notice period); "FALSE" means not yet, and the
// next poll passes the response's ETag so that it waits for a change. The
// first poll passes last_etag=NONE, which the server answers at once with
// the current value, so a machine already preempted is noticed immediately.
// The server is metadata.google.internal unless GCE_METADATA_HOST (host or
// host:port, no scheme) names another, as in the Google client libraries.
//
// "url:http://host/path" (any HTTP endpoint, for example a node agent that
// relays a scheduler's eviction warning): GET every Interval. The contract:
//
//   - 204 No Content or 404 Not Found: no notice.
//   - 200 OK with a JSON object {"deadline": RFC3339, "detail": "..."}
//     ("detail" optional) or with a body that is just an RFC3339 time
//     (surrounding white space ignored): a notice with that deadline.
//   - anything else (other status codes, a body that is neither form,
//     connection errors): an error, logged; the source keeps polling.
//
// The URL should not carry secrets: it may appear in log lines (with any
// password removed). Notices from it have Source "url".
//
// A malformed answer from any source is an error, not a notice: a proxy's
// error page must not stop a training run. Errors are logged at warn the
// first time for each source and at debug after that. Preemption notices
// are logged (notice.preempted); rebalance recommendations are the
// caller's to log, with what it does about them.
package notice
