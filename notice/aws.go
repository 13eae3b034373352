package notice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// awsTokenTTL is the IMDSv2 session token lifetime asked for (the maximum).
const awsTokenTTL = 6 * time.Hour

// awsTokenMargin: the token is renewed this long before it expires.
const awsTokenMargin = time.Minute

// IMDS paths the aws source asks.
const (
	awsSpotPath      = "/latest/meta-data/spot/instance-action"
	awsRebalancePath = "/latest/meta-data/events/recommendations/rebalance"
)

// awsSource polls EC2's rebalance recommendation (until it has seen one)
// and spot/instance-action with an IMDSv2 session token. Only its watcher's
// goroutine uses it.
type awsSource struct {
	cfg        Config
	client     *retryablehttp.Client
	token      string // never logged
	expires    time.Time
	rebalanced bool // a rebalance recommendation has been sent
}

// awsAction is the body of spot/instance-action.
type awsAction struct {
	Action string `json:"action"`
	Time   string `json:"time"`
}

// awsRebalance is the body of events/recommendations/rebalance.
type awsRebalance struct {
	NoticeTime string `json:"noticeTime"`
}

// check asks for the rebalance recommendation, then for the interruption
// notice: a recommendation found in the same check is sent first. A failure
// to read the recommendation does not keep the interruption notice from
// being asked for.
func (a *awsSource) check(ctx context.Context) ([]Notice, bool, error) {
	if err := a.ensureToken(ctx); err != nil {
		return nil, true, err
	}
	var ns []Notice
	var rebErr error
	if !a.rebalanced {
		n, ok, err := a.rebalance(ctx)
		if ctx.Err() != nil {
			return nil, true, ctx.Err()
		}
		rebErr = err
		if ok {
			a.rebalanced = true
			ns = append(ns, n)
		}
	}
	n, ok, err := a.spot(ctx)
	if ok {
		ns = append(ns, n)
	}
	return ns, true, errors.Join(rebErr, err)
}

// spot asks spot/instance-action once.
func (a *awsSource) spot(ctx context.Context) (Notice, bool, error) {
	what := "notice: aws spot instance-action at " + a.cfg.AWSEndpoint
	var act awsAction
	body, found, err := a.getJSON(ctx, awsSpotPath, what, &act)
	if !found || err != nil {
		return Notice{}, false, err
	}
	if act.Action == "" || act.Time == "" {
		return Notice{}, false, fmt.Errorf("%s: body %q lacks action or time", what, snippet(body))
	}
	t, err := time.Parse(time.RFC3339, act.Time)
	if err != nil {
		return Notice{}, false, fmt.Errorf("%s: time %q is not RFC 3339: %w", what, act.Time, err)
	}
	return Notice{Kind: KindPreemption, Source: SourceAWS, Deadline: t, Detail: act.Action}, true, nil
}

// rebalance asks events/recommendations/rebalance once.
func (a *awsSource) rebalance(ctx context.Context) (Notice, bool, error) {
	what := "notice: aws rebalance recommendation at " + a.cfg.AWSEndpoint
	var r awsRebalance
	if _, found, err := a.getJSON(ctx, awsRebalancePath, what, &r); !found || err != nil {
		return Notice{}, false, err
	}
	t, err := time.Parse(time.RFC3339, r.NoticeTime)
	if err != nil {
		return Notice{}, false, fmt.Errorf("%s: noticeTime %q is not RFC 3339: %w", what, r.NoticeTime, err)
	}
	return Notice{Kind: KindRebalance, Source: SourceAWS, Issued: t}, true, nil
}

// getJSON asks IMDS for path and decodes its JSON answer into v, which it
// also returns as read. found is false when IMDS answers 404 (nothing to
// report); errors begin with what.
func (a *awsSource) getJSON(ctx context.Context, path, what string, v any) (body []byte, found bool, err error) {
	status, body, err := a.get(ctx, path, what)
	if err != nil {
		return nil, false, err
	}
	switch status {
	case http.StatusNotFound:
		return body, false, nil
	case http.StatusOK:
		if err := json.Unmarshal(body, v); err != nil {
			return body, false, fmt.Errorf("%s: body %q is not the documented JSON: %w", what, snippet(body), err)
		}
		return body, true, nil
	default:
		return body, false, errStatus(what, status, body)
	}
}

// get asks IMDS for path with the session token that check made sure of;
// errors begin with what. On 401 (the token expired early, or IMDS
// restarted) it fetches a new token and asks again, once.
func (a *awsSource) get(ctx context.Context, path, what string) (int, []byte, error) {
	for attempt := 0; ; attempt++ {
		if a.token == "" {
			if err := a.ensureToken(ctx); err != nil {
				return 0, nil, err
			}
		}
		status, _, body, err := do(ctx, a.client, http.MethodGet, a.cfg.AWSEndpoint+path,
			http.Header{"X-Aws-Ec2-Metadata-Token": {a.token}})
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", what, err)
		}
		if status != http.StatusUnauthorized {
			return status, body, nil
		}
		a.token = ""
		if attempt > 0 {
			return 0, nil, fmt.Errorf("%s: 401 Unauthorized with a fresh IMDSv2 token", what)
		}
	}
}

// ensureToken fetches an IMDSv2 session token when there is none or the one
// held is about to expire.
func (a *awsSource) ensureToken(ctx context.Context) error {
	now := a.cfg.Clock()
	if a.token != "" && now.Before(a.expires) {
		return nil
	}
	a.token = ""
	u := a.cfg.AWSEndpoint + "/latest/api/token"
	ttl := strconv.Itoa(int(awsTokenTTL / time.Second))
	status, h, body, err := do(ctx, a.client, http.MethodPut, u,
		http.Header{"X-Aws-Ec2-Metadata-Token-Ttl-Seconds": {ttl}})
	if err != nil {
		return fmt.Errorf("notice: aws IMDSv2 token at %s: %w", a.cfg.AWSEndpoint, err)
	}
	if status != http.StatusOK {
		// Do not echo the body: on success it would be the token.
		return fmt.Errorf("notice: aws IMDSv2 token at %s: unexpected HTTP status %d %s", a.cfg.AWSEndpoint, status, http.StatusText(status))
	}
	tok := strings.TrimSpace(string(body))
	if tok == "" {
		return fmt.Errorf("notice: aws IMDSv2 token at %s: %w", a.cfg.AWSEndpoint, errNoToken)
	}
	life := awsTokenTTL
	if s, err := strconv.Atoi(h.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds")); err == nil && s > 0 {
		life = time.Duration(s) * time.Second
	}
	a.token = tok
	a.expires = now.Add(life - min(awsTokenMargin, life/2))
	return nil
}
