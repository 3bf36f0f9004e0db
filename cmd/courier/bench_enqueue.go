package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBenchEnqueueCmd is `courier bench enqueue`.
func newBenchEnqueueCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "enqueue",
		Short: "(being written)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return errors.New("not yet") },
	}
}
