// Package docs holds lifeboat's user documentation. It has no code of its
// own: its test keeps LOGS.md, the list of every log event, in step with
// the events the code logs, and keeps every event name of the form
// area.event.
package docs
