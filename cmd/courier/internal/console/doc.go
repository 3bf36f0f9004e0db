// Package console is the web console behind `courier console`: one page
// for both halves of courier. It shows the outbox (counts by status, the
// oldest due event, the last hour's publish rate and relay lag, the dead
// letters by topic and error, a filtered list paged by keyset, an event's
// page) and the dead-letter topics (counts by original topic, error kind
// and error, a filtered list, a dead letter's page with its envelope
// decoded), consumer groups' lag and the relays' breakers. Its actions
// requeue and purge events and replay dead letters, each after showing
// what it would touch and asking for confirmation, each written to the
// outbox's audit table.
//
// Its pages and assets are embedded; it runs no script but its own file
// (a strict Content-Security-Policy forbids any other). Everything it
// shows from Kafka or PostgreSQL is escaped twice over: display.Text makes
// control characters visible, html/template escapes for HTML.
//
// Safety: without tokens it answers only requests whose Host is a
// loopback name (against DNS rebinding); with tokens every request needs
// one (a session cookie after signing in, or an Authorization: Bearer
// header). Every request that changes something must come from the
// console's own pages: a same-origin POST carrying the session's
// anti-forgery token; or from a script's Bearer token, which may ask for
// JSON (Accept: application/json). Either way an action reads its filter
// from its form's fields alone, refusing any it does not take, and acts
// only on the count its confirmation (or dry run) gave.
package console
