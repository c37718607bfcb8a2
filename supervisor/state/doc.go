// Package state is what the supervisor keeps in the coordination store,
// as data and pure rules: the folder layout, the records of locks and cron
// jobs, a firing's result, the one schedule parser, and the firing
// lifecycle as transitions from one record to the next. It does no I/O:
// the supervisor applies what it decides, and every reader (the status
// page, coordrun status, cron list and history, the metrics) decodes with
// these types.
package state
