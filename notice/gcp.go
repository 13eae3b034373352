package notice

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/hashicorp/go-retryablehttp"
)

// gcpSource long-polls GCE's instance/preempted. Only its watcher's
// goroutine uses it.
type gcpSource struct {
	cfg    Config
	client *retryablehttp.Client
	etag   string // of the last answer; "NONE" before any
}

func (g *gcpSource) check(ctx context.Context) ([]Notice, bool, error) {
	q := url.Values{
		"wait_for_change": {"true"},
		"last_etag":       {g.etag},
		"timeout_sec":     {strconv.Itoa(max(1, int(g.cfg.WaitTimeout.Seconds())))},
	}
	u := g.cfg.GCPEndpoint + "/computeMetadata/v1/instance/preempted?" + q.Encode()
	status, h, body, err := do(ctx, g.client, http.MethodGet, u, http.Header{"Metadata-Flavor": {"Google"}})
	if err != nil {
		return nil, true, fmt.Errorf("notice: gcp instance/preempted at %s: %w", g.cfg.GCPEndpoint, err)
	}
	if status != http.StatusOK {
		return nil, true, errStatus("notice: gcp instance/preempted at "+g.cfg.GCPEndpoint, status, body)
	}
	etag := h.Get("ETag")
	switch strings.TrimSpace(string(body)) {
	case "TRUE":
		return []Notice{{Kind: KindPreemption, Source: SourceGCP, Deadline: g.cfg.Clock().Add(GCPNotice), Detail: "preempted"}}, false, nil
	case "FALSE":
		// A new ETag means the server answered with news (or at once, on
		// the first poll): poll again at once, waiting for a change from
		// it. The same or no ETag means it timed out or ignores
		// wait_for_change: wait Interval so that a server that answers at
		// once is not polled in a tight loop.
		changed := etag != "" && etag != g.etag
		if etag != "" {
			g.etag = etag
		}
		return nil, !changed, nil
	default:
		return nil, true, fmt.Errorf("notice: gcp instance/preempted at %s: body %q is neither TRUE nor FALSE", g.cfg.GCPEndpoint, snippet(body))
	}
}
