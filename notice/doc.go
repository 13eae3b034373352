// Package notice watches for cloud preemption notices: the warning a cloud
// gives shortly before it takes a spot or preemptible machine away, earlier
// than the kubelet's SIGTERM.
//
// It owns the sources, how each is asked, and what counts as a notice.
// Watch starts one goroutine per source; each sends at most one Notice (the
// first it sees) and never blocks anything else: a dead or slow metadata
// server only makes that goroutine try again, every request bounded by a
// timeout. HTTP retries and backoff within one check are
// github.com/hashicorp/go-retryablehttp's; between checks each source waits
// Config.Interval.
//
// # Sources
//
// "aws" (EC2 spot, IMDSv2): PUT /latest/api/token with
// X-aws-ec2-metadata-token-ttl-seconds: 21600, then every Interval
// GET /latest/meta-data/spot/instance-action with X-aws-ec2-metadata-token.
// 404 means no notice; 200 with {"action": "terminate"|"stop"|"hibernate",
// "time": RFC3339} is a notice whose Deadline is that time and whose Detail
// is the action. The token is fetched again before it expires and on 401.
//
// "gcp" (preemptible and spot VMs): GET
// /computeMetadata/v1/instance/preempted?wait_for_change=true&last_etag=ETAG
// with Metadata-Flavor: Google, a long poll that the server answers when the
// value changes (or at timeout_sec). "TRUE" is a notice whose Deadline is
// now + 30s (GCP's documented notice period); "FALSE" means not yet, and the
// next poll passes the response's ETag so that it waits for a change. The
// first poll passes last_etag=NONE, which the server answers at once with
// the current value, so a machine already preempted is noticed immediately.
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
// first time for each source and at debug after that.
package notice
