package notice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// urlSource polls an HTTP endpoint with the contract in the package doc.
type urlSource struct {
	cfg    Config
	client *retryablehttp.Client
	url    string
}

// urlNotice is the JSON form of a url source's notice.
type urlNotice struct {
	Deadline string `json:"deadline"`
	Detail   string `json:"detail"`
}

func (s *urlSource) check(ctx context.Context) ([]Notice, bool, error) {
	where := "notice: url source " + redactURL(s.url)
	status, _, body, err := do(ctx, s.client, http.MethodGet, s.url, http.Header{"Accept": {"application/json, text/plain"}})
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", where, err)
	}
	switch status {
	case http.StatusNoContent, http.StatusNotFound:
		return nil, true, nil
	case http.StatusOK:
		n, err := parseURLBody(body)
		if err != nil {
			return nil, true, fmt.Errorf("%s: %w", where, err)
		}
		return []Notice{n}, true, nil
	default:
		return nil, true, errStatus(where, status, body)
	}
}

// parseURLBody reads {"deadline": RFC3339, "detail": "..."} or a bare
// RFC3339 time.
func parseURLBody(body []byte) (Notice, error) {
	b := bytes.TrimSpace(body)
	n := Notice{Kind: KindPreemption, Source: SourceURL}
	if len(b) > 0 && b[0] == '{' {
		var v urlNotice
		if err := json.Unmarshal(b, &v); err != nil {
			return Notice{}, fmt.Errorf("body %q is not the documented JSON: %w", snippet(body), err)
		}
		t, err := time.Parse(time.RFC3339, v.Deadline)
		if err != nil {
			return Notice{}, fmt.Errorf("deadline %q in the JSON body is not RFC 3339: %w", v.Deadline, err)
		}
		n.Deadline, n.Detail = t, v.Detail
		return n, nil
	}
	t, err := time.Parse(time.RFC3339, string(b))
	if err != nil {
		return Notice{}, fmt.Errorf("body %q is neither {\"deadline\": RFC3339} JSON nor an RFC 3339 time", snippet(body))
	}
	n.Deadline = t
	return n, nil
}
