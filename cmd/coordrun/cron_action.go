package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// cronAction is what pause, resume, trigger and backfill did, as --json
// prints it, so a script can tell "paused" from "was already paused"
// without reading the sentence.
type cronAction struct {
	Job string `json:"job"`
	// Action is paused, resumed, triggered or backfilled.
	Action string `json:"action"`
	// Changed is false when there was nothing to do: already paused, not
	// paused, or no missed firing in the range.
	Changed bool `json:"changed"`
	// Request is the request node the job's hosts act on (trigger and
	// backfill).
	Request string `json:"request,omitempty"`
	// Times are the firings requested (trigger and backfill).
	Times []time.Time `json:"times,omitempty"`
}

// printCronAction writes a as JSON under --json, else the sentence.
func printCronAction(cmd *cobra.Command, v *viper.Viper, a cronAction, sentence string) error {
	if v.GetBool("json") {
		return writeJSON(cmd.OutOrStdout(), a)
	}
	_, err := fmt.Fprintln(cmd.OutOrStdout(), sentence)
	return err
}
