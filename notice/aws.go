package notice

import (
	"context"
	"encoding/json"
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

// awsSource polls EC2's spot/instance-action with an IMDSv2 session token.
// Only its watcher's goroutine uses it.
type awsSource struct {
	cfg     Config
	client  *retryablehttp.Client
	token   string // never logged
	expires time.Time
}

// awsAction is the body of spot/instance-action.
type awsAction struct {
	Action string `json:"action"`
	Time   string `json:"time"`
}

func (a *awsSource) check(ctx context.Context) (Notice, bool, bool, error) {
	for attempt := 0; ; attempt++ {
		if err := a.ensureToken(ctx); err != nil {
			return Notice{}, false, true, err
		}
		u := a.cfg.AWSEndpoint + "/latest/meta-data/spot/instance-action"
		status, _, body, err := do(ctx, a.client, http.MethodGet, u,
			http.Header{"X-Aws-Ec2-Metadata-Token": {a.token}})
		if err != nil {
			return Notice{}, false, true, fmt.Errorf("notice: aws spot instance-action at %s: %w", a.cfg.AWSEndpoint, err)
		}
		switch status {
		case http.StatusNotFound:
			return Notice{}, false, true, nil
		case http.StatusUnauthorized:
			// The token expired early or IMDS restarted: fetch a new one
			// and ask again, once.
			a.token = ""
			if attempt == 0 {
				continue
			}
			return Notice{}, false, true, fmt.Errorf("notice: aws spot instance-action at %s: 401 Unauthorized with a fresh IMDSv2 token", a.cfg.AWSEndpoint)
		case http.StatusOK:
			var act awsAction
			if err := json.Unmarshal(body, &act); err != nil {
				return Notice{}, false, true, fmt.Errorf("notice: aws spot instance-action at %s: body %q is not the documented JSON: %w", a.cfg.AWSEndpoint, snippet(body), err)
			}
			if act.Action == "" || act.Time == "" {
				return Notice{}, false, true, fmt.Errorf("notice: aws spot instance-action at %s: body %q lacks action or time", a.cfg.AWSEndpoint, snippet(body))
			}
			t, err := time.Parse(time.RFC3339, act.Time)
			if err != nil {
				return Notice{}, false, true, fmt.Errorf("notice: aws spot instance-action at %s: time %q is not RFC 3339: %w", a.cfg.AWSEndpoint, act.Time, err)
			}
			return Notice{Source: SourceAWS, Deadline: t, Detail: act.Action}, true, true, nil
		default:
			return Notice{}, false, true, errStatus("notice: aws spot instance-action at "+a.cfg.AWSEndpoint, status, body)
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
