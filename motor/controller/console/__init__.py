"""The operator console: a read-only web page of the fleet served by the Controller at /ui, on the
status listener (same TLS and roles as the status pages), live through Server-Sent Events fed by
the broadcaster behind WatchFaultToleranceStatus. The page is plain HTML, CSS and JavaScript in
`static/` (package data; no build step, nothing fetched from elsewhere). See docs/console.md.

- `cells`: an instance as a fleet row, one state letter per original rank (pure);
- `feed`: the console's view of a replica, its documents and the event stream;
- `app`: the routes.
"""
