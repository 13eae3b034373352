package pipeline

import (
	"context"
	"time"

	"github.com/lifeboat-project/lifeboat/metrics"
)

// ReportResume sets m's resume figures from how the trainer starts: the
// source and step it resumes, or "none", the restore's seconds, and
// whether it starts fresh beside a complete checkpoint. A nil m does
// nothing.
func (p *Pipeline) ReportResume(m *metrics.Metrics) {
	if m == nil {
		return
	}
	if p.Resume != nil {
		m.SetResume(p.ResumeSource, p.Resume.Step, p.ResumeSeconds)
	} else {
		m.SetResume("none", -1, p.ResumeSeconds)
	}
	m.SetFreshStartOverProgress(p.FreshOver != nil)
}

// FeedMetrics has m follow the agent's figures, and the store's retries,
// every interval until ctx ends (metrics.Follow). A nil m does nothing.
func (p *Pipeline) FeedMetrics(ctx context.Context, m *metrics.Metrics, interval time.Duration) {
	if m == nil {
		return
	}
	m.Follow(ctx, func() metrics.Totals {
		s := p.Agent.Stats()
		return metrics.Totals{
			Commits: s.Commits, LastStep: s.LastStep, LastCommit: s.LastCommit,
			Uploaded: s.UploadedBytes, Deduped: s.DedupedBytes,
			Failures: s.Failures, Interrupted: s.Interrupted, Torn: s.Torn, Retries: p.Retries(),
			Pending: s.PendingBytes, Throughput: s.Throughput,
		}
	}, interval)
}
